/** Big TOCs: JSON.parse on a worker thread, entries validated in slices on the main thread. */
import { PerformanceObserver } from 'node:perf_hooks';
import { describe, expect, test } from 'vitest';
import { lookupPath } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { parsePreparedToc, prepareTocInline } from '../../src/format/toc.js';
import { OFF_THREAD_MEMBER_THRESHOLD, prepareTocOffThread } from '../../src/format/toc-worker.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { gzipSync } from 'node:zlib';
import {
  buildEStargz,
  estargzFooterBytes,
  tarPadding,
  tocMember,
  ustarHeader,
} from '../helpers/format-builders.js';
import { sha256 } from '../helpers/format-fixtures.js';

const DIGEST = sha256('x');

function bigEntries(n: number): Record<string, unknown>[] {
  return Array.from({ length: n }, (_, i) => ({
    name: `usr/lib/d${i % 500}/file-${i}.so`,
    type: 'reg',
    size: 1,
    modtime: '2020-01-02T03:04:05Z',
    mode: 0o100644,
    offset: 0,
    digest: DIGEST,
    chunkDigest: DIGEST,
  }));
}

/**
 * Run `fn`, returning its value and the longest time the event loop was busy between two 1 ms
 * timer ticks, minus GC pauses. Busy time comes from eventLoopUtilization, so waiting for a CPU
 * on a loaded machine (the loop idle in poll) does not count: only code holding the loop does.
 */
async function measureLag<T>(fn: () => Promise<T>): Promise<{ value: T; lagMs: number }> {
  const gcs: Array<[number, number]> = [];
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcs.push([e.startTime, e.startTime + e.duration]);
  });
  obs.observe({ entryTypes: ['gc'] });
  const busy: Array<[from: number, to: number, active: number]> = [];
  let last = performance.now();
  let elu = performance.eventLoopUtilization();
  const timer = setInterval(() => {
    const now = performance.now();
    const next = performance.eventLoopUtilization();
    const active = performance.eventLoopUtilization(next, elu).active;
    if (active > 5) busy.push([last, now, active]);
    elu = next;
    last = now;
  }, 1);
  try {
    const value = await fn();
    clearInterval(timer);
    await new Promise((r) => setTimeout(r, 20)); // GC entries are delivered asynchronously
    let lagMs = 0;
    for (const [from, to, active] of busy) {
      let gc = 0;
      for (const [gs, ge] of gcs) gc += Math.max(0, Math.min(to, ge) - Math.max(from, gs));
      lagMs = Math.max(lagMs, active - gc);
    }
    return { value, lagMs };
  } finally {
    clearInterval(timer);
    obs.disconnect();
  }
}

async function both(json: Buffer, maxEntries = 1e6): Promise<[unknown, unknown]> {
  const run = async (prepare: () => Promise<unknown> | unknown) => {
    try {
      const p = (await prepare()) as Parameters<typeof parsePreparedToc>[0];
      return { digest: p.jsonDigest, toc: await parsePreparedToc(p, { maxEntries }) };
    } catch (err) {
      if (!(err instanceof StoreError)) throw err;
      return { code: err.code };
    }
  };
  return [
    await run(() => prepareTocInline(json)),
    await run(() => prepareTocOffThread(json, { maxEntries })),
  ];
}

describe('TOC parsing off the main thread', () => {
  test('worker and inline parsing agree, including odd keys and edge values', async () => {
    const entries = [
      ...bigEntries(300),
      { NAME: 'Weird', TYPE: 'dir', __proto__x: 1, xattrs: { 'user.a': 'dg==' }, uid: 0, mode: null },
      { name: 'a/./b/../c', type: 'symlink', linkName: '../x', modtime: '0001-01-01T00:00:00Z' },
    ];
    // a literal "__proto__" key cannot be written in an object literal: patch the JSON text
    const json = Buffer.from(
      JSON.stringify({ Version: 1, entries, tarSplitDigest: DIGEST }).replace('"__proto__x"', '"__proto__"'),
    );
    expect(json.includes('"__proto__":1')).toBe(true);
    const [inline, worker] = await both(json);
    expect(worker).toEqual(inline);
    expect((inline as { digest: string }).digest).toBe(sha256(json));
  });

  test('schema errors are the same both ways', async () => {
    const cases = [
      '{"entries":[{"name":"a","type":"reg","size":1e400}]}', // non-finite number
      '{"entries":[{"name":"a","type":"reg","size":-0.5}]}',
      '{"entries":{}}',
      '{"entries":[1]}',
      '[]',
      '{"entries":[',
      '{"version":"x","entries":[]}',
    ];
    for (const text of cases) {
      const [inline, worker] = await both(Buffer.from(text));
      expect(worker, text).toEqual(inline);
      expect((inline as { code?: string }).code, text).toMatch(/^E_BAD_TOC$/);
    }
    const many = Buffer.from(JSON.stringify({ entries: bigEntries(50) }));
    const [i, w] = await both(many, 49);
    expect(w).toEqual(i);
    expect(i).toEqual({ code: 'E_TOO_MANY_ENTRIES' });
  });

  test('openLayer on a ~40 MB TOC keeps every event-loop stall short', async () => {
    // Few entries with a large ignored field each: the bytes are what used to block (concat, CRC,
    // copying the entries text back), while per-entry work and GC stay small.
    const n = 10_000;
    const { blob, json } = buildEStargz([Buffer.from('x')], (off) => ({
      version: 1,
      entries: bigEntries(n).map((e, i) => ({
        ...e,
        offset: off[0],
        comment: sha256(String(i)).slice(7).repeat(64),
      })),
    }));
    expect(json.length).toBeGreaterThan(30 << 20);
    // Blocking by our code shows in every attempt; noise from other processes on a shared machine
    // does not, so the least-blocked attempt is the honest measure. GC pauses (the test itself
    // holds ~100 MB of TOC objects) are not our code blocking either: subtracted.
    const lags: number[] = [];
    const digest = sha256(json); // 40 MB hashed by the test itself: outside the measurement
    for (let attempt = 0; attempt < 3; attempt++) {
      const r = await measureLag(() => openLayer(new BufferRangeReader(blob), { expectedTocDigest: digest }));
      expect(r.value.tocDigest).toBe(digest);
      expect(r.value.nodes.length - 1).toBe(1 + 500 + 2 + n); // root, d*, usr, usr/lib, files
      expect(lookupPath(r.value, 'usr/lib/d7/file-507.so')).toMatchObject({ size: 1, mode: 0o644 });
      lags.push(r.lagMs);
      expect(blob.length - json.length).toBeLessThan(json.length); // a real member, inflated on the worker
    }
    console.log(
      `${(json.length / 2 ** 20).toFixed(0)} MB TOC: longest busy event loop (GC excluded) ${lags.map((l) => l.toFixed(1)).join(' / ')} ms`,
    );
    // Inflate, CRC, hashing and JSON.parse run on a worker and the entries come back by transfer;
    // the main thread only validates entries in ~8 ms slices (~20 ms measured here, JIT warm-up
    // included). Inflating, CRC and copying the entries text on the main thread measured 61-65 ms.
    expect(Math.min(...lags)).toBeLessThan(35);
  });

  test('errors found on the worker (CRC, size cap, truncation, JSON) are typed like inline ones', async () => {
    const n = 30_000;
    const { blob, json, tocOffset } = buildEStargz([Buffer.from('x')], (off) => ({
      version: 1,
      entries: bigEntries(n).map((e) => ({ ...e, offset: off[0] })),
    }));
    const footerStart = blob.length - 51;
    expect(footerStart - tocOffset).toBeGreaterThan(OFF_THREAD_MEMBER_THRESHOLD);
    const open = (b: Buffer, opts = {}) => openLayer(new BufferRangeReader(b), opts).catch((e: unknown) => e);
    // CRC32 in the trailer (4 bytes before the ISIZE that ends the member)
    const badCrc = Buffer.from(blob);
    badCrc[footerStart - 8] = badCrc[footerStart - 8]! ^ 1;
    expect(await open(badCrc)).toMatchObject({ code: 'E_BAD_TOC', message: expect.stringMatching(/CRC32/) });
    // JSON over the cap: seen from the tar header already
    expect(await open(blob, { maxTocBytes: json.length - 1 })).toMatchObject({ code: 'E_TOC_TOO_LARGE' });
    // JSON within the cap but the member inflating far beyond it: only the worker's inflate sees it
    const padded = gzipSync(
      Buffer.concat([
        ustarHeader({ name: 'stargz.index.json', size: json.length, mode: 0 }),
        json,
        tarPadding(json.length),
        Buffer.alloc(4 << 20),
      ]),
    );
    const paddedBlob = Buffer.concat([blob.subarray(0, tocOffset), padded, estargzFooterBytes(tocOffset)]);
    expect(await open(paddedBlob, { maxTocBytes: json.length + 1000 })).toMatchObject({
      code: 'E_TOC_TOO_LARGE',
    });
    expect(await open(paddedBlob)).toMatchObject({ format: 'estargz', tocJsonDigest: sha256(json) });
    // corrupt deflate data in the middle of the member
    const badData = Buffer.from(blob);
    badData.fill(0xff, tocOffset + 100_000, tocOffset + 100_040);
    expect(await open(badData)).toMatchObject({ code: expect.stringMatching(/^E_BAD_(TOC|FOOTER)$/) });
    // a member whose deflate stream is cut short: no trailer
    const cut = Buffer.concat([blob.subarray(0, footerStart - 5000), blob.subarray(footerStart)]);
    expect(await open(cut)).toMatchObject({ code: expect.stringMatching(/^E_BAD_(TOC|FOOTER)$/) });
    // a digest the caller trusts is checked against what the worker hashed
    expect(await open(blob, { expectedTocDigest: sha256('other') })).toMatchObject({
      code: 'E_TOC_DIGEST_MISMATCH',
    });
    // JSON that does not parse, in a big member
    const broken = json.subarray(0, json.length - 100); // cut inside the entries array
    const member = tocMember(broken);
    expect(member.length).toBeGreaterThan(OFF_THREAD_MEMBER_THRESHOLD);
    const brokenBlob = Buffer.concat([blob.subarray(0, tocOffset), member, estargzFooterBytes(tocOffset)]);
    expect(await open(brokenBlob)).toMatchObject({
      code: 'E_BAD_TOC',
      message: expect.stringMatching(/JSON/),
    });
  });

  test('an aborted signal stops a worker parse with E_ABORTED', async () => {
    const json = Buffer.from(JSON.stringify({ entries: bigEntries(100_000) }));
    for (const delay of [0, 20]) {
      const controller = new AbortController();
      const pending = prepareTocOffThread(json, { maxEntries: 1e6, signal: controller.signal });
      await new Promise((r) => setTimeout(r, delay));
      controller.abort();
      const err = await pending.catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreError);
      expect((err as StoreError).code).toBe('E_ABORTED');
    }
  });
});
