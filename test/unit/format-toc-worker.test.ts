/** Big TOCs: JSON.parse on a worker thread, entries validated in slices on the main thread. */
import { describe, expect, test } from 'vitest';
import { lookupPath } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { parsePreparedToc, prepareTocInline } from '../../src/format/toc.js';
import { OFF_THREAD_THRESHOLD, prepareTocOffThread } from '../../src/format/toc-worker.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildEStargz } from '../helpers/format-builders.js';
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

  test('openLayer on a multi-MB TOC uses the worker and keeps the event loop turning', async () => {
    const n = 40_000;
    const { blob, json } = buildEStargz([Buffer.from('x')], (off) => ({
      version: 1,
      entries: bigEntries(n).map((e) => ({ ...e, offset: off[0] })),
    }));
    expect(json.length).toBeGreaterThan(OFF_THREAD_THRESHOLD);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    try {
      const index = await openLayer(new BufferRangeReader(blob), { expectedTocDigest: sha256(json) });
      expect(index.tocDigest).toBe(sha256(json));
      expect(index.nodes.length - 1).toBe(1 + 500 + 2 + n); // root, d*, usr, usr/lib, files
      expect(lookupPath(index, 'usr/lib/d7/file-507.so')).toMatchObject({ size: 1, mode: 0o644 });
    } finally {
      clearInterval(timer);
    }
    // the slicer gives the loop a turn every few ms while tens of thousands of entries are processed
    expect(ticks).toBeGreaterThan(5);
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
