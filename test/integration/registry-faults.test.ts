import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  MemoryCredentialProvider,
  RegistryClient,
  parseReference,
  type RegistryClientOptions,
} from '../../src/registry/index.js';
import { StoreError } from '../../src/util/errors.js';
import { always, faultSequence, startFaultServer, type FaultServer } from '../helpers/fault-server.js';
import { sha256 } from '../helpers/push.js';

const BLOB = randomBytes(600_000);
const DIGEST = sha256(BLOB);
const BS = 50_000;

function slice(offset: number, length: number): Buffer {
  return BLOB.subarray(offset, offset + length);
}

async function caught(p: Promise<unknown>): Promise<StoreError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(StoreError);
  return e as StoreError;
}

describe('blob reads against a fault-injecting server', () => {
  let srv: FaultServer;
  let other: FaultServer;
  const clients: RegistryClient[] = [];
  const client = (o: RegistryClientOptions = {}) => {
    const c = new RegistryClient({ blockSize: BS, retry: { minWaitMs: 5, maxWaitMs: 200 }, ...o });
    clients.push(c);
    return c;
  };
  const open = (c: RegistryClient, s: FaultServer = srv) =>
    c.openBlob(parseReference(`${s.host}/faulty/repo:t`), DIGEST);

  beforeAll(async () => {
    srv = await startFaultServer({ blobs: { [DIGEST]: BLOB } });
    other = await startFaultServer({ blobs: { [DIGEST]: BLOB } });
  });
  afterEach(async () => {
    srv.setPlan(undefined);
    other.setPlan(undefined);
    srv.requests.length = 0;
    other.requests.length = 0;
    await Promise.all(clients.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    await srv?.stop();
    await other?.stop();
  });

  it('sizes blobs by HEAD, or by `Range: bytes=0-0` when HEAD is refused', async () => {
    const c = client();
    expect((await open(c)).size).toBe(BLOB.length);
    srv.setPlan((req) => (req.method === 'HEAD' ? { kind: 'status', status: 405 } : undefined));
    srv.requests.length = 0;
    const r = await open(c);
    expect(r.size).toBe(BLOB.length);
    expect(srv.requests.map((q) => `${q.method} ${q.headers.range ?? ''}`)).toEqual([
      'HEAD ',
      'GET bytes=0-0',
    ]);
    srv.setPlan(undefined);
    expect((await r.read(BLOB.length - 3, 3)).equals(slice(BLOB.length - 3, 3))).toBe(true);
  });

  it('rides out a burst of 5xx (500, 502, 503, 504) and returns correct bytes', async () => {
    const r = await open(client());
    srv.setPlan(
      faultSequence(
        { kind: 'status', status: 500 },
        { kind: 'status', status: 502 },
        { kind: 'status', status: 503 },
        { kind: 'status', status: 504 },
      ),
    );
    const got = await r.read(123_456, 70_000);
    expect(got.equals(slice(123_456, 70_000))).toBe(true);
    expect(srv.blobGets().length).toBe(5);
  });

  it('gives up with E_REGISTRY_STATUS after max_retries', async () => {
    const r = await open(client({ retry: { maxRetries: 2, minWaitMs: 1, maxWaitMs: 5 } }));
    srv.setPlan(always({ kind: 'status', status: 503 }));
    const e = await caught(r.read(0, 10));
    expect(e.code).toBe('E_REGISTRY_STATUS');
    expect(e.context.status).toBe(503);
    expect(srv.blobGets().length).toBe(3);
  });

  it('does not retry 501 or 404', async () => {
    const r = await open(client());
    srv.setPlan(always({ kind: 'status', status: 501 }));
    expect((await caught(r.read(0, 10))).code).toBe('E_REGISTRY_STATUS');
    expect(srv.blobGets().length).toBe(1);
    srv.setPlan(always({ kind: 'status', status: 404 }));
    expect((await caught(r.read(BS * 3, 10))).code).toBe('E_REGISTRY_NOT_FOUND');
    expect(srv.blobGets().length).toBe(2);
  });

  it('honours Retry-After on 429', async () => {
    const r = await open(client());
    srv.setPlan(faultSequence({ kind: 'status', status: 429, headers: { 'retry-after': '1' } }));
    const t0 = Date.now();
    const got = await r.read(0, 1000);
    const waited = Date.now() - t0;
    expect(got.equals(slice(0, 1000))).toBe(true);
    expect(waited).toBeGreaterThanOrEqual(950);
    expect(waited).toBeLessThan(3000);
  });

  it('fails fast when Retry-After is beyond the deadline', async () => {
    const r = await open(client({ fetchTimeoutMs: 2000 }));
    srv.setPlan(always({ kind: 'status', status: 429, headers: { 'retry-after': '30' } }));
    const t0 = Date.now();
    const e = await caught(r.read(0, 10));
    expect(Date.now() - t0).toBeLessThan(1500);
    expect(e.code).toBe('E_REGISTRY_STATUS');
    expect(e.context.retryAfterMs).toBe(30_000);
  });

  it('retries a connection reset before the response and in the middle of the body', async () => {
    const r = await open(client());
    srv.setPlan(faultSequence({ kind: 'reset' }, { kind: 'reset-mid-body' }));
    const got = await r.read(200_000, 150_000);
    expect(got.equals(slice(200_000, 150_000))).toBe(true);
    expect(srv.blobGets().length).toBe(3);
  });

  it('retries truncated bodies (closed connection and clean short chunked body)', async () => {
    const r = await open(client());
    srv.setPlan(faultSequence({ kind: 'truncate' }, { kind: 'short-body' }));
    const got = await r.read(0, 100_000);
    expect(got.equals(slice(0, 100_000))).toBe(true);
    expect(srv.blobGets().length).toBe(3);
    // multipart bodies too
    srv.setPlan(faultSequence({ kind: 'truncate' }));
    const parts = await r.readRanges(
      [
        { offset: 300_000, length: 10 },
        { offset: 500_000, length: 10 },
      ],
      {},
    );
    expect(parts[0]!.equals(slice(300_000, 10))).toBe(true);
    expect(parts[1]!.equals(slice(500_000, 10))).toBe(true);
  });

  it('turns a body that is always truncated into E_TRUNCATED, never short data', async () => {
    const r = await open(client({ retry: { maxRetries: 2, minWaitMs: 1 } }));
    srv.setPlan(always({ kind: 'short-body' }));
    expect((await caught(r.read(0, 10))).code).toBe('E_TRUNCATED');
  });

  it('follows a redirect to another origin: Authorization dropped, Range kept', async () => {
    const authed = await startFaultServer({
      blobs: { [DIGEST]: BLOB },
      basicAuth: { user: 'u', pass: 'sekrit-pw' },
    });
    try {
      const mem = new MemoryCredentialProvider();
      const ref = parseReference(`${authed.host}/faulty/repo:t`);
      mem.addCredentials({ [ref.toString()]: { username: 'u', password: 'sekrit-pw' } });
      const c = client({
        credentials: mem,
        hosts: { [authed.host]: { headers: { 'x-registry-extra': 'only-here' } } },
      });
      const r = await c.openBlob(ref, DIGEST);
      authed.setPlan((req) =>
        req.method === 'GET' && req.path.includes('/blobs/')
          ? { kind: 'redirect', location: other.url }
          : undefined,
      );
      const got = await r.read(250_000, 1000);
      expect(got.equals(slice(250_000, 1000))).toBe(true);
      const toRegistry = authed.blobGets();
      expect(toRegistry.at(-1)!.headers.authorization).toMatch(/^Basic /);
      expect(toRegistry.at(-1)!.headers['x-registry-extra']).toBe('only-here');
      const atStorage = other.blobGets();
      expect(atStorage).toHaveLength(1);
      expect(atStorage[0]!.headers.authorization).toBeUndefined();
      expect(atStorage[0]!.headers['x-registry-extra']).toBeUndefined();
      expect(atStorage[0]!.headers.range).toBe('bytes=250000-250999');
    } finally {
      await authed.stop();
    }
  });

  it('copes with a server that ignores Range (200 + whole blob) and takes only what it needs', async () => {
    const r = await open(client());
    srv.setPlan(always({ kind: 'ignore-range' }));
    const got = await r.read(400_000, 20);
    expect(got.equals(slice(400_000, 20))).toBe(true);
    const multi = await r.readRanges(
      [
        { offset: 10, length: 5 },
        { offset: 590_000, length: 100 },
      ],
      {},
    );
    expect(multi[0]!.equals(slice(10, 5))).toBe(true);
    expect(multi[1]!.equals(slice(590_000, 100))).toBe(true);
  });

  it.each([400, 416])(
    'falls back to single ranges when multi-range gets %i, and stays there',
    async (status) => {
      const r = await open(client());
      srv.setPlan(always({ kind: 'reject-multi', status }));
      const ranges = [
        { offset: 0, length: 10 },
        { offset: 200_000, length: 10 },
        { offset: 450_000, length: 60_000 },
      ];
      const got = await r.readRanges(ranges, {});
      ranges.forEach((rg, i) => expect(got[i]!.equals(slice(rg.offset, rg.length))).toBe(true));
      const gets = srv.blobGets();
      expect(gets[0]!.headers.range).toContain(',');
      expect(gets.slice(1).every((g) => !String(g.headers.range).includes(','))).toBe(true);
      // later reads on the same host go single-range straight away
      srv.requests.length = 0;
      const more = await r.readRanges(
        [
          { offset: 100_000, length: 1 },
          { offset: 300_000, length: 1 },
        ],
        {},
      );
      expect(more[1]!.equals(slice(300_000, 1))).toBe(true);
      expect(srv.blobGets().every((g) => !String(g.headers.range).includes(','))).toBe(true);
    },
  );

  it('refetches ranges a multi-range answer left out (plain 206 with one range)', async () => {
    const r = await open(client());
    srv.setPlan(faultSequence({ kind: 'partial-206' }));
    const got = await r.readRanges(
      [
        { offset: 5, length: 5 },
        { offset: 555_555, length: 5 },
      ],
      {},
    );
    expect(got[0]!.equals(slice(5, 5))).toBe(true);
    expect(got[1]!.equals(slice(555_555, 5))).toBe(true);
  });

  it('rejects a Content-Range with a wrong or unknown total', async () => {
    const r = await open(client());
    srv.setPlan(always({ kind: 'bad-total' }));
    expect((await caught(r.read(0, 10))).code).toBe('E_REGISTRY_PROTOCOL');
    srv.setPlan(always({ kind: 'star-total' }));
    expect((await caught(r.read(BS * 2, 10))).code).toBe('E_REGISTRY_PROTOCOL');
  });

  it('a 206 claiming a huge span is rejected (typed) before anything is allocated for it', async () => {
    // the registry says the blob has 8 GiB; its 206 then claims all of it for a 1000-byte read
    const HUGE = 8 * 1024 ** 3;
    srv.setPlan((req) =>
      req.method === 'HEAD'
        ? {
            kind: 'status',
            status: 200,
            headers: { 'content-length': String(HUGE), 'docker-content-digest': DIGEST },
          }
        : req.method === 'GET'
          ? { kind: 'range-206', start: 0, end: HUGE - 1, total: HUGE, noLength: true }
          : undefined,
    );
    const r = await open(client());
    expect(r.size).toBe(HUGE);
    const e = await caught(r.read(1_000_000, 1000));
    expect(e.code).toBe('E_REGISTRY_PROTOCOL');
    expect(e.message).toMatch(/outside the requested bytes/);
    expect(srv.blobGets()).toHaveLength(1);
  });

  it('rejects a 206 part larger than the request, or one that overlaps none of it', async () => {
    const r = await open(client());
    // asked for 100000-100999, answered with the whole blob as a 206
    srv.setPlan(always({ kind: 'range-206', start: 0, end: BLOB.length - 1 }));
    const big = await caught(r.read(100_000, 1000));
    expect(big.code).toBe('E_REGISTRY_PROTOCOL');
    srv.requests.length = 0;
    // answered with a neighbouring block of the right length
    srv.setPlan(always({ kind: 'range-206', start: 300_000, end: 349_999 }));
    const wrong = await caught(r.read(100_000, 1000));
    expect(wrong.code).toBe('E_REGISTRY_PROTOCOL');
    expect(wrong.message).toMatch(/outside the requested bytes|overlaps none/);
    expect(srv.blobGets()).toHaveLength(1);
    // a server may coalesce ranges (gap included) into one part: accepted, exact bytes
    srv.requests.length = 0;
    srv.setPlan(faultSequence({ kind: 'range-206', start: 400_010, end: 540_099 }));
    const got = await r.readRanges(
      [
        { offset: 400_010, length: 10 },
        { offset: 540_000, length: 100 },
      ],
      {},
    );
    expect(got[0]!.equals(slice(400_010, 10))).toBe(true);
    expect(got[1]!.equals(slice(540_000, 100))).toBe(true);
    expect(srv.blobGets()).toHaveLength(1);
  });

  it('sizes a blob by a range GET when HEAD is refused by a redirected storage URL or with 403', async () => {
    // the registry redirects blob requests to storage whose pre-signed URLs only allow GET
    srv.setPlan((req) =>
      req.path.includes('/blobs/') ? { kind: 'redirect', location: other.url } : undefined,
    );
    other.setPlan((req) => (req.method === 'HEAD' ? { kind: 'status', status: 403 } : undefined));
    const r = await open(client());
    expect(r.size).toBe(BLOB.length);
    expect(other.requests.map((q) => `${q.method} ${q.headers.range ?? ''}`)).toContain('GET bytes=0-0');
    expect((await r.read(123_456, 10)).equals(slice(123_456, 10))).toBe(true);
    // the registry itself answering HEAD with 403 (a front-end that refuses HEAD)
    srv.setPlan((req) => (req.method === 'HEAD' ? { kind: 'status', status: 403 } : undefined));
    other.setPlan(undefined);
    srv.requests.length = 0;
    expect((await open(client())).size).toBe(BLOB.length);
    expect(srv.requests.map((q) => `${q.method} ${q.headers.range ?? ''}`)).toEqual([
      'HEAD ',
      'GET bytes=0-0',
    ]);
    // a real "not found" from the registry is still final
    srv.setPlan((req) => (req.method === 'HEAD' ? { kind: 'status', status: 404 } : undefined));
    expect((await caught(open(client()))).code).toBe('E_REGISTRY_NOT_FOUND');
  });

  it('ends a hanging request with E_DEADLINE within the deadline', async () => {
    const r = await open(client({ requestTimeoutMs: 300, fetchTimeoutMs: 1000 }));
    srv.setPlan(always({ kind: 'hang' }));
    const t0 = Date.now();
    const e = await caught(r.read(0, 10));
    const took = Date.now() - t0;
    expect(e.code).toBe('E_DEADLINE');
    // 1 s deadline; the slack is for a loaded 2-CPU machine, not for another attempt
    expect(took).toBeLessThan(2500);
    expect(srv.blobGets().length).toBeGreaterThanOrEqual(2); // attempts timed out and were retried
  });

  it('aborts promptly on the caller signal with E_ABORTED', async () => {
    const r = await open(client());
    srv.setPlan(always({ kind: 'hang' }));
    const ctl = new AbortController();
    const p = r.read(0, 10, ctl.signal);
    setTimeout(() => ctl.abort(), 100);
    const t0 = Date.now();
    expect((await caught(p)).code).toBe('E_ABORTED');
    expect(Date.now() - t0).toBeLessThan(500);
  });

  it('fetches exactly the ranges asked: no block rounding, no read-ahead, no overlapping requests', async () => {
    const r = await open(client());
    srv.requests.length = 0;
    // a sequential reader (sharing and reading ahead are the layer engine's job, not the reader's)
    const len = 70_000;
    for (let off = 0; off + len <= 420_000; off += len) {
      expect((await r.read(off, len)).equals(slice(off, len))).toBe(true);
    }
    const gets = srv.blobGets().map((q) => q.headers.range);
    expect(gets).toEqual(Array.from({ length: 6 }, (_, i) => `bytes=${i * len}-${i * len + len - 1}`));
    expect(r.stats().bytes).toBe(420_000);
    // overlapping and touching ranges of one call are merged into one exact range
    srv.requests.length = 0;
    const got = await r.readRanges(
      [
        { offset: 500_000, length: 100 },
        { offset: 500_050, length: 100 },
        { offset: 500_150, length: 10 },
      ],
      {},
    );
    expect(got[1]!.equals(slice(500_050, 100))).toBe(true);
    expect(got[2]!.equals(slice(500_150, 10))).toBe(true);
    expect(srv.blobGets().map((q) => q.headers.range)).toEqual(['bytes=500000-500159']);
  });

  it('a caller abort ends only that read; the next read of the same bytes succeeds', async () => {
    const r = await open(client());
    const ctl = new AbortController();
    srv.setPlan(always({ kind: 'delay', ms: 100 }));
    const p = r.read(100_000, 50_000, ctl.signal);
    ctl.abort();
    expect((await caught(p)).code).toBe('E_ABORTED');
    expect((await r.read(100_000, 50_000)).equals(slice(100_000, 50_000))).toBe(true);
  });

  it('uses a mirror first (with ?ns=) and falls back to the registry when the mirror fails', async () => {
    const mirror = await startFaultServer({ blobs: {} });
    try {
      const upstream = parseReference(`${srv.host}/faulty/repo:t`);
      const c = client({
        hosts: { [srv.host]: { mirrors: [{ host: mirror.host }] } },
        retry: { maxRetries: 0 },
      });
      const r = await c.openBlob(upstream, DIGEST);
      expect((await r.read(0, 5)).equals(slice(0, 5))).toBe(true);
      expect(mirror.requests[0]!.query).toBe(`?ns=${encodeURIComponent(srv.host)}`);
      expect(srv.requests.filter((q) => q.method === 'HEAD')).toHaveLength(1);
      // with the blob on the mirror, the mirror serves it
      mirror.addBlob(DIGEST, BLOB);
      srv.requests.length = 0;
      const r2 = await c.openBlob(upstream, DIGEST);
      expect((await r2.read(BS * 5, 5)).equals(slice(BS * 5, 5))).toBe(true);
      expect(srv.requests).toHaveLength(0);
      expect(mirror.blobGets().at(-1)!.query).toBe(`?ns=${encodeURIComponent(srv.host)}`);
    } finally {
      await mirror.stop();
    }
  });
});
