import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { hostsFromStoreConfig } from '../../src/cli/config-options.js';
import { subtract } from '../../src/registry/span-bytes.js';
import { HostHealth } from '../../src/registry/host-health.js';
import { HostRangeProfile } from '../../src/registry/host-range-profile.js';
import { resolveEndpoints, endpointUrl } from '../../src/registry/hosts.js';
import { parseReference } from '../../src/registry/reference.js';
import { parseRegistriesConf } from '../../src/registry/registries-conf.js';
import { WholeBlobStream, WholeBlobStreams } from '../../src/registry/whole-blob-stream.js';
import { buildConfig } from '../../src/store/config/load.js';
import { isStoreError } from '../../src/util/errors.js';

describe('HostRangeProfile', () => {
  const R = (n: number) => Array.from({ length: n }, (_, i) => ({ offset: i * 100, length: 10 }));

  it('starts optimistic (multi, 64 per request) and splits by the limit', () => {
    const p = new HostRangeProfile('h', 64);
    expect(p.plan(R(130)).map((g) => g.length)).toEqual([64, 64, 2]);
    expect(p.snapshot()).toEqual({ mode: 'multi', maxRanges: 64, learned: false });
  });

  it('first-range-only (Dragonfly): single ranges from then on', () => {
    const p = new HostRangeProfile('h', 64);
    p.noteFirstRangeOnly(5);
    expect(p.snapshot()).toMatchObject({ mode: 'first-range-only', learned: true });
    expect(p.plan(R(3))).toEqual(R(3).map((r) => [r]));
  });

  it('416 for many ranges (Zot, 16): halves the limit until answered', () => {
    const p = new HostRangeProfile('h', 64);
    p.noteMultiRejected(416, 64);
    expect(p.snapshot().maxRanges).toBe(32);
    p.noteMultiRejected(416, 32);
    expect(p.snapshot()).toMatchObject({ mode: 'multi', maxRanges: 16 });
    // 416 for two ranges: no multi-range at all
    p.noteMultiRejected(416, 2);
    expect(p.snapshot().mode).toBe('single');
  });

  it('400 / 501 drop to single ranges', () => {
    for (const status of [400, 501]) {
      const p = new HostRangeProfile('h', 64);
      p.noteMultiRejected(status, 3);
      expect(p.snapshot()).toMatchObject({ mode: 'single', maxRanges: 1, learned: true });
    }
  });

  it('404 to multi-range (Spegel) is confirmed by a served single range, undone by a 404 single', () => {
    const p = new HostRangeProfile('h', 64);
    p.noteMultiRejected(404, 3);
    expect(p.snapshot()).toMatchObject({ mode: 'single', learned: false });
    p.noteSingleServed();
    expect(p.snapshot()).toMatchObject({ mode: 'single', learned: true });
    const q = new HostRangeProfile('h', 64);
    q.noteMultiRejected(404, 3);
    q.noteSingleNotFound(); // the blob is missing: says nothing about multi-range
    expect(q.snapshot().mode).toBe('multi');
  });

  it('200 to a single range: ignores Range; 200 to a multi-range set only drops multi-range', () => {
    const p = new HostRangeProfile('h', 64);
    p.noteWholeBlob(4);
    expect(p.snapshot().mode).toBe('single');
    p.noteWholeBlob(1);
    expect(p.ignoresRange).toBe(true);
  });
});

describe('HostHealth (injected clock)', () => {
  it('cools a failed host down, doubling per failure, and forgets on success', () => {
    let now = 0;
    const h = new HostHealth({ now: () => now, cooldownMs: 1000, maxCooldownMs: 3000 });
    expect(h.hostFailed('m')).toBe(1000);
    expect(h.isCooling('m')).toBe(true);
    now = 1000;
    expect(h.isCooling('m')).toBe(false);
    expect(h.hostFailed('m')).toBe(2000);
    expect(h.hostFailed('m')).toBe(3000); // capped
    now = 3999;
    expect(h.isCooling('m')).toBe(true);
    h.succeeded('m');
    expect(h.isCooling('m')).toBe(false);
    expect(h.hostFailed('m')).toBe(1000);
  });

  it('a 404 cools the host for that blob only; order() moves cooling hosts last', () => {
    let now = 0;
    const h = new HostHealth({ now: () => now, cooldownMs: 1000 });
    h.blobMissing('m', 'sha256:a');
    expect(h.isCooling('m', 'sha256:a')).toBe(true);
    expect(h.isCooling('m', 'sha256:b')).toBe(false);
    const eps = [{ origin: 'm' }, { origin: 'o' }];
    expect(h.order(eps, 'sha256:a').map((e) => e.origin)).toEqual(['o', 'm']);
    expect(h.order(eps, 'sha256:b').map((e) => e.origin)).toEqual(['m', 'o']);
    now = 1000;
    expect(h.order(eps, 'sha256:a').map((e) => e.origin)).toEqual(['m', 'o']);
  });
});

/** A body we push chunks into by hand. */
function manualBody() {
  const queue: Array<Buffer | null | Error> = [];
  let wake: (() => void) | undefined;
  let aborted: unknown;
  const body = (async function* () {
    while (true) {
      while (queue.length === 0) await new Promise<void>((r) => (wake = r));
      const x = queue.shift()!;
      if (x === null) return;
      if (x instanceof Error) throw x;
      yield x;
    }
  })();
  const push = (x: Buffer | null | Error) => {
    queue.push(x);
    wake?.();
  };
  return {
    src: {
      body,
      abort: (r: unknown) => {
        aborted = r;
        push(null);
      },
    },
    push,
    aborted: () => aborted,
  };
}

/** Let the stream's pump take what was pushed. */
const tick = () => new Promise<void>((r) => setImmediate(r));

describe('WholeBlobStream', () => {
  const blob = randomBytes(1000);

  it('answers each waiting read as soon as its last byte passes; every byte reaches the sink once, in order', async () => {
    const seen: Array<[number, number]> = [];
    const s = new WholeBlobStream('sha256:x', blob.length, {
      sink: { onPassingBytes: (_d, off, b) => seen.push([off, b.length]) },
    });
    const b = manualBody();
    const a = s.want(100, 50)!;
    const c = s.want(600, 300)!;
    let cDone = false;
    void c.then(() => (cDone = true));
    s.run(b.src);
    b.push(blob.subarray(0, 400));
    expect((await a).equals(blob.subarray(100, 150))).toBe(true);
    // a read behind the stream cannot be served by it
    expect(s.want(50, 10)).toBeUndefined();
    b.push(blob.subarray(400, 800));
    await tick();
    expect(cDone).toBe(false);
    b.push(blob.subarray(800));
    expect((await c).equals(blob.subarray(600, 900))).toBe(true);
    b.push(null);
    await s.ended;
    expect(s.live).toBe(false);
    expect(seen).toEqual([
      [0, 400],
      [400, 400],
      [800, 200],
    ]);
  });

  it('a body shorter than the blob fails the waiting reads with E_TRUNCATED', async () => {
    const s = new WholeBlobStream('sha256:x', blob.length);
    const b = manualBody();
    const w = s.want(900, 50)!;
    s.run(b.src);
    b.push(blob.subarray(0, 500));
    b.push(null);
    const err = await w.catch((e: unknown) => e);
    expect(isStoreError(err, 'E_TRUNCATED')).toBe(true);
  });

  it('a body longer than the blob is a protocol error, never misplaced bytes', async () => {
    const s = new WholeBlobStream('sha256:x', 10);
    const b = manualBody();
    const w = s.want(5, 5)!;
    s.run(b.src);
    b.push(Buffer.alloc(11));
    const err = await w.catch((e: unknown) => e);
    expect(isStoreError(err, 'E_REGISTRY_PROTOCOL')).toBe(true);
  });

  it('without a sink, the last reader giving up hangs up the response', async () => {
    const s = new WholeBlobStream('sha256:x', blob.length);
    const b = manualBody();
    const ctl = new AbortController();
    const w = s.want(900, 50, ctl.signal)!;
    s.run(b.src);
    b.push(blob.subarray(0, 100));
    await tick();
    ctl.abort();
    expect(isStoreError(await w.catch((e: unknown) => e), 'E_ABORTED')).toBe(true);
    await s.ended;
    expect(b.aborted()).toBeDefined();
  });

  it('WholeBlobStreams keeps at most one live stream per host and blob', async () => {
    const streams = new WholeBlobStreams();
    const s = streams.create('http://m', 'sha256:x', 10);
    expect(streams.get('http://m', 'sha256:x')).toBe(s);
    expect(() => streams.create('http://m', 'sha256:x', 10)).toThrow();
    expect(streams.create('http://o', 'sha256:x', 10)).toBeDefined();
    s.fail(new Error('gone'));
    await s.ended;
    expect(streams.get('http://m', 'sha256:x')).toBeUndefined();
    expect(streams.create('http://m', 'sha256:x', 10)).toBeDefined();
    expect(streams.started.get('http://m|sha256:x')).toBe(2);
  });
});

describe('mirror endpoints', () => {
  const ref = parseReference('registry.example/team/app:1');

  it('?ns= by default, off with nsQuery=false; rangedReads kept on the endpoint', () => {
    const eps = resolveEndpoints(ref, {
      'registry.example': {
        mirrors: [
          {
            host: 'df.local:65001',
            insecure: true,
            headers: { 'X-Dragonfly-Registry': 'https://registry.example' },
          },
          { host: 'cache.local:5000', insecure: true, nsQuery: false, rangedReads: 'next-host' },
        ],
      },
    });
    expect(eps.map((e) => [e.host, e.isUpstream, e.rangedReads])).toEqual([
      ['df.local:65001', false, undefined],
      ['cache.local:5000', false, 'next-host'],
      ['registry.example', true, undefined],
    ]);
    expect(endpointUrl(eps[0]!, 'blobs/sha256:a')).toBe(
      'http://df.local:65001/v2/team/app/blobs/sha256:a?ns=registry.example',
    );
    expect(endpointUrl(eps[1]!, 'blobs/sha256:a')).toBe('http://cache.local:5000/v2/team/app/blobs/sha256:a');
    expect(eps[0]!.options.headers).toEqual({ 'X-Dragonfly-Registry': 'https://registry.example' });
  });

  it('registries.conf [[registry.mirror]] entries come before the registry', () => {
    const hosts = parseRegistriesConf(`
[[registry]]
location = "registry.example"
[[registry.mirror]]
location = "cache.local:5000"
insecure = true
`);
    const eps = resolveEndpoints(ref, hosts);
    expect(eps[0]!.host).toBe('cache.local:5000');
    expect(eps[0]!.isUpstream).toBe(false);
    expect(eps[eps.length - 1]!.host).toBe('registry.example');
  });

  it('config.toml mirror keys ranged_reads and ns_query', () => {
    const text = `
[[resolver.host."docker.io".mirrors]]
host = "df.local:65001"
insecure = true
ranged_reads = "next-host"
ns_query = false
header = { "X-Dragonfly-Registry" = ["https://index.docker.io"] }
`;
    const { config } = buildConfig(text, { mountpoint: '/mnt' });
    expect(config.resolver.hosts['docker.io']!.mirrors[0]).toMatchObject({
      host: 'df.local:65001',
      rangedReads: 'next-host',
      nsQuery: false,
      header: { 'X-Dragonfly-Registry': ['https://index.docker.io'] },
    });
    // serve maps them into the registry client's hosts config: range reads skip the mirror, no ?ns=
    const hosts = hostsFromStoreConfig(config);
    expect(hosts['docker.io']!.mirrors![0]).toMatchObject({ rangedReads: 'next-host', nsQuery: false });
    const [mirror] = resolveEndpoints(parseReference('docker.io/library/alpine:3'), hosts);
    expect(mirror).toMatchObject({ host: 'df.local:65001', rangedReads: 'next-host' });
    expect(mirror!.ns).toBeUndefined();
    // the defaults (mirror, ns_query = true) add nothing
    const plain = buildConfig(text.replace(/ranged_reads.*\n/, '').replace(/ns_query.*\n/, ''), {
      mountpoint: '/mnt',
    }).config;
    const m = hostsFromStoreConfig(plain)['docker.io']!.mirrors![0]!;
    expect('rangedReads' in m || 'nsQuery' in m).toBe(false);
    expect(() => buildConfig(text.replace('"next-host"', '"sideways"'), { mountpoint: '/mnt' })).toThrow(
      /ranged_reads/,
    );
  });
});

describe('subtract', () => {
  it('leaves exactly the bytes no span holds', () => {
    const spans = [
      { offset: 10, data: Buffer.alloc(10) },
      { offset: 25, data: Buffer.alloc(5) },
    ];
    expect(subtract([{ offset: 0, length: 40 }], spans)).toEqual([
      { offset: 0, length: 10 },
      { offset: 20, length: 5 },
      { offset: 30, length: 10 },
    ]);
    expect(subtract([{ offset: 12, length: 5 }], spans)).toEqual([]);
  });
});
