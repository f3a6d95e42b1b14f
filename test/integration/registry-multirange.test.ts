import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveEndpoints } from '../../src/registry/hosts.js';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import { consumeRangeResponse, type RangeOutcome } from '../../src/registry/range-fetch.js';
import { retryPolicy } from '../../src/registry/retry.js';
import { Transport } from '../../src/registry/transport.js';
import { pushBlob, sha256, type PushTarget } from '../helpers/push.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

// the blob of lab/range-test.txt
const SMALL = Buffer.from('0123456789abcdefghijABCDEFGHIJklmnopqrstKLMNOPQRST');

describe('multi-range requests against a real docker-registry', () => {
  let reg: TestRegistry;
  let t: PushTarget;
  const big = randomBytes(3_000_000);

  beforeAll(async () => {
    reg = await startRegistry();
    t = { url: reg.url };
    await pushBlob(t, 'ranges/blob', SMALL);
    await pushBlob(t, 'ranges/blob', big);
  });
  afterAll(async () => {
    await reg?.stop();
  });

  /** One raw request with exactly these (inclusive) ranges, interpreted by the client's response code. */
  async function raw(ranges: Array<[number, number]>): Promise<RangeOutcome> {
    const ref = parseReference(`${reg.host}/ranges/blob:x`);
    const [ep] = resolveEndpoints(ref, {});
    const tr = new Transport({ retry: retryPolicy({ maxRetries: 0 }), requestTimeoutMs: 5000 });
    try {
      const rs = ranges.map(([a, b]) => ({ offset: a, length: b - a + 1 }));
      return await tr.send(
        {
          ep: ep!,
          path: `blobs/${sha256(SMALL)}`,
          headers: { range: `bytes=${ranges.map(([a, b]) => `${a}-${b}`).join(',')}` },
          ref: ref.toString(),
          what: 'blob',
          deadlineMs: 5000,
        },
        (res) => consumeRangeResponse(res, rs, SMALL.length, sha256(SMALL), {}),
      );
    } finally {
      await tr.close();
    }
  }

  const text = (o: RangeOutcome) =>
    o.kind === 'multi-rejected' ? [] : o.spans.map((s) => [s.offset, s.data.toString()]);

  it('parses the registry multipart/byteranges answer', async () => {
    const o = await raw([
      [0, 9],
      [20, 29],
    ]);
    expect(o).toMatchObject({ kind: 'parts', multipart: true });
    expect(text(o)).toEqual([
      [0, '0123456789'],
      [20, 'ABCDEFGHIJ'],
    ]);
  });

  it('overlapping parts are served as asked', async () => {
    const o = await raw([
      [0, 9],
      [5, 14],
    ]);
    expect(text(o)).toEqual([
      [0, '0123456789'],
      [5, '56789abcde'],
    ]);
  });

  it('degenerate answer: ranges summing past the size get 200 + whole blob; we keep only the ranges', async () => {
    const o = await raw([
      [0, 40],
      [10, 49],
    ]);
    expect(o.kind).toBe('whole-blob');
    expect(text(o)).toEqual([
      [0, SMALL.subarray(0, 41).toString()],
      [10, SMALL.subarray(10, 50).toString()],
    ]);
  });

  it('degenerate answer: a partly unsatisfiable set gives a plain 206 with the good range only', async () => {
    const o = await raw([
      [0, 9],
      [100, 200],
    ]);
    expect(o).toMatchObject({ kind: 'parts', multipart: false });
    expect(text(o)).toEqual([[0, '0123456789']]);
  });

  it('fully unsatisfiable: 416 (multi -> fallback signal, single -> typed error)', async () => {
    expect(
      await raw([
        [100, 200],
        [300, 400],
      ]),
    ).toEqual({ kind: 'multi-rejected', status: 416 });
    await expect(raw([[100, 200]])).rejects.toMatchObject({ code: 'E_REGISTRY_PROTOCOL' });
  });

  it('serves many scattered ranges with few requests and exact bytes', async () => {
    const client = new RegistryClient({ blockSize: 10_000, maxRangesPerRequest: 64 });
    try {
      const reader = await client.openBlob(parseReference(`${reg.host}/ranges/blob:x`), sha256(big));
      // 100 ranges in 100 distinct, non-adjacent blocks -> 100 runs -> 2 requests of <= 64 ranges
      const ranges = Array.from({ length: 100 }, (_, i) => ({
        offset: i * 25_000 + (i % 7) * 13,
        length: 1 + ((i * 37) % 900),
      }));
      const got = await reader.readRanges(ranges, {});
      ranges.forEach((r, i) =>
        expect(got[i]!.equals(big.subarray(r.offset, r.offset + r.length))).toBe(true),
      );
      expect(reader.stats().requests).toBe(2);
      const gets = () => reg.log.filter((l) => l.includes(`/blobs/${sha256(big)}`) && l.includes('"GET '));
      // the access log line lags the response a little
      const deadline = Date.now() + 3000;
      while (gets().length < 2 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 20));
      expect(gets()).toHaveLength(2);
      // random access afterwards stays exact
      for (let k = 0; k < 40; k++) {
        const off = Math.floor(Math.random() * (big.length - 1));
        const len = 1 + Math.floor(Math.random() * Math.min(120_000, big.length - off - 1));
        expect((await reader.read(off, len)).equals(big.subarray(off, off + len))).toBe(true);
      }
    } finally {
      await client.close();
    }
  });

  it('force_single_range_mode sends only single ranges', async () => {
    const client = new RegistryClient({ blockSize: 10_000, forceSingleRange: true });
    try {
      const reader = await client.openBlob(parseReference(`${reg.host}/ranges/blob:x`), sha256(big));
      const got = await reader.readRanges(
        [
          { offset: 0, length: 5 },
          { offset: 2_000_000, length: 5 },
        ],
        {},
      );
      expect(got[1]!.equals(big.subarray(2_000_000, 2_000_005))).toBe(true);
      expect(reader.stats().requests).toBe(2);
    } finally {
      await client.close();
    }
  });
});
