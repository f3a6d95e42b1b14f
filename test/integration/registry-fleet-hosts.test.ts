import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuthFileProvider } from '../../src/registry/auth-files.js';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { RangeFetchShared, RegistryBlobReader } from '../../src/registry/blob-reader.js';
import { MemoryCredentialProvider, CredentialChain } from '../../src/registry/credentials.js';
import { resolveEndpoints, type HostsConfig } from '../../src/registry/hosts.js';
import { parseReference } from '../../src/registry/reference.js';
import { retryPolicy } from '../../src/registry/retry.js';
import { Transport } from '../../src/registry/transport.js';
import type { ByteRange } from '../../src/registry/byte-ranges.js';
import { isStoreError } from '../../src/util/errors.js';
import type { PassingBytesSink } from '../../src/registry/whole-blob-stream.js';
import { startRangeHost, type RangeBehaviour, type RangeHost } from '../helpers/range-host.js';

/**
 * The fleet table of issue 15, one local server per row: every read returns the right bytes and
 * the bytes fetched from the host stay <= 1.2x the blob.
 */

const SIZE = 2 * 1024 * 1024 + 12_345;
const blob = randomBytes(SIZE);
const digest = `sha256:${createHash('sha256').update(blob).digest('hex')}`;

const servers: RangeHost[] = [];
const transports: Transport[] = [];
afterEach(async () => {
  await Promise.all(transports.splice(0).map((t) => t.close()));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

async function host(behaviour: RangeBehaviour, extra: { noContentType?: boolean } = {}): Promise<RangeHost> {
  const s = await startRangeHost({ blobs: { [digest]: blob }, behaviour, chunkBytes: 16 * 1024, ...extra });
  servers.push(s);
  return s;
}

function transport(creds?: MemoryCredentialProvider): Transport {
  const t = new Transport({
    retry: retryPolicy({ maxRetries: 2, minWaitMs: 1, maxWaitMs: 5 }),
    requestTimeoutMs: 10_000,
    ...(creds ? { credentials: new CredentialChain([creds]) } : {}),
  });
  transports.push(t);
  return t;
}

/** A deterministic scatter of small reads (a file-system read pattern: many files, any order). */
function scatter(n: number, seed: number): ByteRange[] {
  let x = seed;
  const rnd = () => {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    return x / 0x7fffffff;
  };
  const out: ByteRange[] = [];
  for (let i = 0; i < n; i++) {
    const length = 1 + Math.floor(rnd() * 20_000);
    const offset = Math.floor(rnd() * (SIZE - length));
    out.push({ offset, length });
  }
  return out;
}

function expectBytes(got: Buffer[], ranges: readonly ByteRange[]): void {
  expect(got.length).toBe(ranges.length);
  ranges.forEach((r, i) => {
    expect(got[i]!.length).toBe(r.length);
    expect(got[i]!.equals(blob.subarray(r.offset, r.offset + r.length))).toBe(true);
  });
}

function source(hosts: HostsConfig, ref: string, shared: RangeFetchShared, t: Transport): RegistryBlobReader {
  const r = parseReference(ref);
  return new RegistryBlobReader({
    transport: t,
    shared,
    endpoints: resolveEndpoints(r, hosts),
    ref: r.toString(),
    digest,
    size: SIZE,
    fetchTimeoutMs: 30_000,
  });
}

/** A sink that keeps what streams past (the local compressed-bytes store, in memory here). */
function memorySink(): {
  sink: PassingBytesSink;
  has(r: ByteRange): Buffer | undefined;
  stored: number;
} {
  const store = Buffer.alloc(SIZE);
  const mark = new Uint8Array(SIZE);
  const o = {
    stored: 0,
    sink: {
      onPassingBytes(_d: string, off: number, buf: Buffer) {
        buf.copy(store, off);
        mark.fill(1, off, off + buf.length);
        o.stored += buf.length;
      },
      readPassed(_d: string, offset: number, length: number) {
        return Promise.resolve(o.has({ offset, length }));
      },
    },
    has(r: ByteRange) {
      for (let i = r.offset; i < r.offset + r.length; i++) if (!mark[i]) return undefined;
      return store.subarray(r.offset, r.offset + r.length);
    },
  };
  return o;
}

describe('each row of the fleet table, as the only host', () => {
  const rows: Array<{ behaviour: RangeBehaviour; mode: string; noContentType?: boolean }> = [
    { behaviour: 'multi', mode: 'multi' },
    { behaviour: 'multi', mode: 'multi', noContentType: true },
    { behaviour: 'first-range-only', mode: 'first-range-only' },
    { behaviour: 'max-16', mode: 'multi' },
    { behaviour: 'multi-404', mode: 'single' },
  ];
  for (const row of rows) {
    it(`${row.behaviour}${row.noContentType ? ' (no Content-Type)' : ''}: right bytes, <= 1.2x the blob`, async () => {
      const s = await host(row.behaviour, { noContentType: row.noContentType });
      const shared = new RangeFetchShared();
      const src = source({ [s.host]: {} }, `${s.host}/lab/app:1`, shared, transport());
      // 40 reads of 20 ranges each (multi-range requests), then the same scatter again as singles
      const all = scatter(800, 7);
      for (let i = 0; i < all.length; i += 20) {
        const batch = all.slice(i, i + 20);
        expectBytes(await src.readRanges(batch, {}), batch);
      }
      for (const r of scatter(50, 99)) expectBytes(await src.readRanges([r], {}), [r]);
      const asked = all.reduce((n, r) => n + r.length, 0) + 50 * 20_000;
      expect(s.bodyBytes()).toBeLessThanOrEqual(Math.max(1.2 * asked, 0));
      expect(shared.rangeProfiles()[s.url]!.mode).toBe(row.mode);
      if (row.behaviour === 'max-16')
        expect(shared.rangeProfiles()[s.url]!.maxRanges).toBeLessThanOrEqual(16);
      // learned once: at most a handful of refused requests overall
      const refused = s.requests.filter(
        (q) => q.method === 'GET' && (q.headers.range ?? '').split(',').length > 1,
      );
      if (row.behaviour === 'multi-404' || row.behaviour === 'first-range-only')
        expect(refused.length).toBe(1);
    });
  }

  it('single-range hosts: ranges within singleRangeGap share one request', async () => {
    const s = await host('first-range-only');
    const shared = new RangeFetchShared();
    const r = parseReference(`${s.host}/lab/app:1`);
    const src = new RegistryBlobReader({
      transport: transport(),
      shared,
      endpoints: resolveEndpoints(r, {}),
      ref: r.toString(),
      digest,
      size: SIZE,
      fetchTimeoutMs: 30_000,
      singleRangeGap: 4096,
    });
    const ranges = Array.from({ length: 10 }, (_, i) => ({ offset: 100_000 + i * 3000, length: 1000 }));
    expectBytes(await src.readRanges(ranges, {}), ranges); // learns first-range-only on the way
    const before = s.requests.length;
    const again = ranges.map((x) => ({ offset: x.offset + 500_000, length: x.length }));
    expectBytes(await src.readRanges(again, {}), again);
    expect(s.requests.length - before).toBe(1);
  });

  it('ignores Range (Distribution proxy cold miss): one stream serves every read, <= 1.2x the blob', async () => {
    const s = await host('ignore-range');
    const mem = memorySink();
    const shared = new RangeFetchShared({ sink: mem.sink });
    const src = source({ [s.host]: {} }, `${s.host}/lab/app:1`, shared, transport());
    // many reads at once, all over the blob: one response answers all of them
    const reads = scatter(200, 3);
    const got = await Promise.all(reads.map((r) => src.readRanges([r], {})));
    got.forEach((g, i) => expectBytes(g, [reads[i]!]));
    // later reads: the lead's blob reader finds passed bytes in the local store first
    await shared.streams.get(s.url, digest)?.ended;
    for (const r of scatter(100, 11)) {
      const local = mem.has(r);
      if (local) expect(local.equals(blob.subarray(r.offset, r.offset + r.length))).toBe(true);
      else expectBytes(await src.readRanges([r], {}), [r]);
    }
    expect(s.bodyBytes()).toBeLessThanOrEqual(1.2 * SIZE);
    expect(s.requests.filter((q) => q.method === 'GET').length).toBe(1);
    expect(s.maxConcurrentGets()).toBe(1);
    expect(shared.streams.started.get(`${s.url}|${digest}`)).toBe(1);
    expect(shared.rangeProfiles()[s.url]!.mode).toBe('ignores-range');
  });

  it('bypassCache (the DiffID re-check) never answers from the sink: the bytes come from the host again', async () => {
    const s = await host('ignore-range');
    const mem = memorySink();
    const shared = new RangeFetchShared({ sink: mem.sink });
    const src = source({ [s.host]: {} }, `${s.host}/lab/app:1`, shared, transport());
    const r = { offset: 5000, length: 100 };
    expectBytes(await src.readRanges([r], {}), [r]);
    await shared.streams.get(s.url, digest)?.ended;
    expectBytes(await src.readRanges([r], {}), [r]);
    expect(s.requests.filter((q) => q.method === 'GET').length).toBe(1);
    expectBytes(await src.readRanges([r], { bypassCache: true }), [r]);
    expect(s.requests.filter((q) => q.method === 'GET').length).toBe(2);
  });

  it('ignores Range, no sink: reads behind the stream wait for its end, never a parallel second stream', async () => {
    const s = await startRangeHost({
      blobs: { [digest]: blob },
      behaviour: 'ignore-range',
      chunkBytes: 16 * 1024,
      holdAfterBytes: 64 * 1024,
    });
    servers.push(s);
    const shared = new RangeFetchShared();
    const src = source({ [s.host]: {} }, `${s.host}/lab/app:1`, shared, transport());
    const late = { offset: 1000, length: 5000 };
    const early = { offset: SIZE - 5000, length: 5000 };
    // learn first (the first answer is a 200), then a read ahead and a read behind at once
    expectBytes(await src.readRanges([late], {}), [late]);
    const first = src.readRanges([early], {});
    const stream = shared.streams.get(s.url, digest)!;
    expect(stream).toBeDefined();
    // once the stream is past byte 10, a read there is behind it
    await vi.waitFor(() => expect(stream.position).toBeGreaterThan(10));
    expect(stream.live).toBe(true);
    const behind = src.readRanges([{ offset: 0, length: 10 }], {});
    s.release();
    expectBytes(await first, [early]);
    expectBytes(await behind, [{ offset: 0, length: 10 }]);
    // never two requests for this blob at the same time on this host
    expect(s.maxConcurrentGets()).toBe(1);
    expect(shared.streams.started.get(`${s.url}|${digest}`)).toBe(3);
  });
});

describe('mirrors', () => {
  it('a mirror that ignores Range with next-host: range reads go to the origin; header and ?ns= reach the mirror', async () => {
    const mirror = await host('ignore-range');
    const origin = await host('multi');
    const shared = new RangeFetchShared();
    const hosts: HostsConfig = {
      [origin.host]: {
        mirrors: [
          {
            host: mirror.host,
            headers: { 'X-Dragonfly-Registry': 'http://' + origin.host },
            rangedReads: 'next-host',
          },
        ],
      },
    };
    const src = source(hosts, `${origin.host}/lab/app:1`, shared, transport());
    const reads = scatter(40, 5);
    expectBytes(await src.readRanges(reads, {}), reads);
    expect(mirror.requests.length).toBe(0);
    expect(origin.bodyBytes()).toBeLessThanOrEqual(1.2 * reads.reduce((n, r) => n + r.length, 0) + 64 * 1024);
  });

  it('split: reads far ahead of the mirror stream go to the origin; with the origin down they wait on the stream', async () => {
    const mirror = await startRangeHost({
      blobs: { [digest]: blob },
      behaviour: 'ignore-range',
      chunkBytes: 16 * 1024,
      holdAfterBytes: 64 * 1024,
    });
    servers.push(mirror);
    const origin = await host('multi');
    const mem = memorySink();
    const shared = new RangeFetchShared({ sink: mem.sink, splitAheadBytes: 256 * 1024 });
    const hosts: HostsConfig = { [origin.host]: { mirrors: [{ host: mirror.host, rangedReads: 'split' }] } };
    const src = source(hosts, `${origin.host}/lab/app:1`, shared, transport());
    // the footer: far ahead of the (held) stream, served by the origin at once
    const tail = { offset: SIZE - 100, length: 100 };
    expectBytes(await src.readRanges([tail], {}), [tail]);
    expect(origin.bodyBytes()).toBe(100);
    // a read near the stream waits for it
    const near = { offset: 70 * 1024, length: 1000 };
    const nearRead = src.readRanges([near], {});
    // the origin goes down: a far read falls back to waiting on the mirror's stream
    origin.setFailStatus(503);
    const far = { offset: SIZE - 50_000, length: 1000 };
    const farRead = src.readRanges([far], {});
    mirror.release();
    expectBytes(await nearRead, [near]);
    expectBytes(await farRead, [far]);
    expect(mirror.bodyBytes()).toBeLessThanOrEqual(1.2 * SIZE);
    expect(shared.streams.started.get(`${mirror.url}|${digest}`)).toBe(1);
    expect(mirror.maxConcurrentGets()).toBe(1);
  });

  it('split without a sink: far reads go to the origin and start no stream that nobody would use', async () => {
    const mirror = await host('ignore-range');
    const origin = await host('multi');
    const shared = new RangeFetchShared({ splitAheadBytes: 256 * 1024 });
    const hosts: HostsConfig = { [origin.host]: { mirrors: [{ host: mirror.host, rangedReads: 'split' }] } };
    const src = source(hosts, `${origin.host}/lab/app:1`, shared, transport());
    for (let i = 1; i <= 5; i++) {
      const r = { offset: SIZE - i * 100_000, length: 5000 };
      expectBytes(await src.readRanges([r], {}), [r]);
    }
    // one GET taught us the mirror ignores Range (its answer hung up); none after that
    expect(mirror.requests.filter((q) => q.method === 'GET').length).toBe(1);
    // what this process took from the mirror (the kernel may have buffered more before the hang-up)
    expect(shared.traffic()[mirror.url]?.bytes ?? 0).toBe(0);
    expect(shared.streams.started.get(`${mirror.url}|${digest}`)).toBeUndefined();
  });

  it('mirror first: its header and ?ns= arrive; no origin credential reaches it', async () => {
    const mirror = await host('first-range-only');
    const origin = await host('multi');
    const creds = new MemoryCredentialProvider();
    creds.addCredentials({ [`${origin.host}/lab/app:1`]: { username: 'u', password: 'origin-secret' } });
    const shared = new RangeFetchShared();
    const hosts: HostsConfig = {
      [origin.host]: {
        mirrors: [{ host: mirror.host, headers: { 'X-Dragonfly-Registry': `http://${origin.host}` } }],
      },
    };
    const src = source(hosts, `${origin.host}/lab/app:1`, shared, transport(creds));
    const reads = scatter(30, 8);
    expectBytes(await src.readRanges(reads, {}), reads);
    expect(origin.requests.length).toBe(0);
    const gets = mirror.requests.filter((q) => q.method === 'GET');
    expect(gets.length).toBeGreaterThan(0);
    for (const q of mirror.requests) {
      expect(q.headers['x-dragonfly-registry']).toBe(`http://${origin.host}`);
      expect(q.query).toBe(`?ns=${encodeURIComponent(origin.host)}`);
      expect(q.headers.authorization).toBeUndefined();
    }
  });

  it("credentials go only where they belong: the origin's to the origin, the mirror's own to the mirror", async () => {
    const mirror = await startRangeHost({
      blobs: { [digest]: blob },
      behaviour: 'multi',
      basicAuth: { user: 'mirror-user', pass: 'mirror-pass' },
    });
    servers.push(mirror);
    const origin = await startRangeHost({
      blobs: { [digest]: blob },
      behaviour: 'multi',
      basicAuth: { user: 'origin-user', pass: 'origin-pass' },
    });
    servers.push(origin);
    const dir = await mkdtemp(join(tmpdir(), 'fleet-auth-'));
    try {
      const b64 = (u: string, p: string) => Buffer.from(`${u}:${p}`).toString('base64');
      const authFile = join(dir, 'auth.json');
      await writeFile(
        authFile,
        JSON.stringify({
          auths: {
            [origin.host]: { auth: b64('origin-user', 'origin-pass') },
            [mirror.host]: { auth: b64('mirror-user', 'mirror-pass') },
          },
        }),
      );
      const helper = new MemoryCredentialProvider();
      helper.addCredentials({
        [`${origin.host}/lab/app:1`]: { username: 'origin-user', password: 'origin-pass' },
      });
      const t = new Transport({
        retry: retryPolicy({ maxRetries: 1, minWaitMs: 1 }),
        requestTimeoutMs: 10_000,
        credentials: new CredentialChain([helper, new AuthFileProvider({ paths: [authFile], env: {} })]),
      });
      transports.push(t);
      const hosts: HostsConfig = { [origin.host]: { mirrors: [{ host: mirror.host }] } };
      const src = source(hosts, `${origin.host}/lab/app:1`, new RangeFetchShared(), t);
      const reads = scatter(10, 4);
      expectBytes(await src.readRanges(reads, {}), reads);
      // the mirror served, with its own credentials; nothing of the origin's reached it
      const originSecret = b64('origin-user', 'origin-pass');
      const mirrorAuth = mirror.requests.map((q) => q.headers.authorization ?? '');
      expect(mirrorAuth).toContain(`Basic ${b64('mirror-user', 'mirror-pass')}`);
      expect(mirrorAuth.some((a) => a.includes(originSecret))).toBe(false);
      expect(origin.requests.length).toBe(0);
      // the mirror down: the origin gets its own credentials
      mirror.setFailStatus(503);
      const src2 = source(hosts, `${origin.host}/lab/app:1`, new RangeFetchShared(), t);
      expectBytes(await src2.readRanges(reads, {}), reads);
      expect(origin.requests.map((q) => q.headers.authorization)).toContain(`Basic ${originSecret}`);
      expect(mirror.requests.some((q) => (q.headers.authorization ?? '').includes(originSecret))).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a failing mirror (503) is skipped, cooled down, and tried again after the cool-down (injected clock)', async () => {
    const mirror = await host('multi');
    const origin = await host('multi');
    mirror.setFailStatus(503);
    let now = 1_000_000;
    const shared = new RangeFetchShared({ now: () => now, cooldownMs: 30_000 });
    const hosts: HostsConfig = { [origin.host]: { mirrors: [{ host: mirror.host }] } };
    const src = source(hosts, `${origin.host}/lab/app:1`, shared, transport());
    const r1 = [{ offset: 10, length: 100 }];
    expectBytes(await src.readRanges(r1, {}), r1);
    const mirrorTries = mirror.requests.length;
    expect(mirrorTries).toBeGreaterThan(0);
    expect(origin.requests.length).toBe(1);
    // cooling: the mirror is not asked
    now += 10_000;
    expectBytes(await src.readRanges(r1, {}), r1);
    expect(mirror.requests.length).toBe(mirrorTries);
    // after the cool-down it is asked again, and serves
    mirror.setFailStatus(undefined);
    now += 30_000;
    const originBefore = origin.requests.length;
    expectBytes(await src.readRanges(r1, {}), r1);
    expect(mirror.requests.length).toBe(mirrorTries + 1);
    expect(origin.requests.length).toBe(originBefore);
  });

  it('a mirror that times out is skipped to the origin and cooled down', async () => {
    const mirror = await startRangeHost({ blobs: { [digest]: blob }, behaviour: 'multi', hang: true });
    servers.push(mirror);
    const origin = await host('multi');
    const shared = new RangeFetchShared();
    // the per-attempt timeout of this mirror (config.toml request_timeout_sec) is what fires
    const hosts: HostsConfig = { [origin.host]: { mirrors: [{ host: mirror.host, requestTimeoutMs: 300 }] } };
    const src = source(hosts, `${origin.host}/lab/app:1`, shared, transport());
    const r = [{ offset: 1, length: 10 }];
    expectBytes(await src.readRanges(r, {}), r);
    const tries = mirror.requests.filter((q) => q.method === 'GET').length;
    expect(tries).toBeGreaterThan(0);
    expect(tries).toBeLessThanOrEqual(2); // one retry at most before failing over
    expectBytes(await src.readRanges(r, {}), r);
    expect(mirror.requests.filter((q) => q.method === 'GET').length).toBe(tries);
  });

  it('a mirror without the blob (404) is skipped for that blob; the origin serves it', async () => {
    const mirror = await startRangeHost({ blobs: {}, behaviour: 'multi' });
    servers.push(mirror);
    const origin = await host('multi');
    const shared = new RangeFetchShared();
    const hosts: HostsConfig = { [origin.host]: { mirrors: [{ host: mirror.host }] } };
    const src = source(hosts, `${origin.host}/lab/app:1`, shared, transport());
    const reads = scatter(10, 2);
    expectBytes(await src.readRanges(reads, {}), reads);
    // one multi-range question (404), one single range to tell "no multi-range" from "no blob"
    expect(mirror.requests.length).toBe(2);
    expect(shared.rangeProfiles()[mirror.url]!.mode).toBe('multi');
  });

  it('the last host failing surfaces its error', async () => {
    const origin = await host('multi');
    origin.setFailStatus(500);
    const shared = new RangeFetchShared();
    const src = source({}, `${origin.host}/lab/app:1`, shared, transport());
    const err = await src.readRanges([{ offset: 0, length: 10 }], {}).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_REGISTRY_STATUS')).toBe(true);
  });
});
