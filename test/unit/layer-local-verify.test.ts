import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BlobStore, type LocalBlob } from '../../src/cache/blob-store.js';
import { openLayer } from '../../src/format/open-layer.js';
import { terminateCodec } from '../../src/format/codec.js';
import type { Chunk } from '../../src/format/model.js';
import { planLayerAsync } from '../../src/layer/plan.js';
import { verifyFromLocal } from '../../src/layer/local-verify.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { SAMPLES_TINY, VECTOR_A, VECTOR_B } from '../helpers/format-fixtures.js';

const sha = (b: Buffer): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

/** A chunk sink that checks what it gets against the digest (the test's own, independent check). */
class Sink {
  readonly got = new Map<string, Buffer>();
  has(d: string): boolean {
    return this.got.has(d);
  }
  async put(d: string, data: Buffer): Promise<void> {
    expect(sha(data)).toBe(d);
    this.got.set(d, Buffer.from(data));
  }
}

let root: string;
let store: BlobStore;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'local-verify-'));
  store = await BlobStore.open({ root, durable: false });
});
afterEach(async () => {
  await store.close();
  await rm(root, { recursive: true, force: true });
});
afterAll(async () => {
  await terminateCodec();
});

/** Store `blob` through the blob store in out-of-order, overlapping pieces (as fetches would). */
async function storeBlob(blob: Buffer): Promise<LocalBlob> {
  const b = await store.openBlob(sha(blob), blob.length);
  const piece = Math.max(1, Math.floor(blob.length / 7));
  const starts: number[] = [];
  for (let o = 0; o < blob.length; o += piece) starts.push(o);
  starts.reverse();
  await Promise.all(starts.map((o) => b.write(o, blob.subarray(o, Math.min(blob.length, o + piece + 13)))));
  expect(b.complete).toBe(true);
  return b;
}

async function chunksOf(blob: Buffer): Promise<{ chunks: Chunk[]; compression: 'gzip' | 'zstd' }> {
  const index = await openLayer(new BufferRangeReader(blob));
  return { chunks: (await planLayerAsync(index)).chunks, compression: index.compression };
}

async function diffIdOf(sample: string, layer: number): Promise<string> {
  const cfg = JSON.parse(await readFile(join(SAMPLES_TINY, sample, 'config.json'), 'utf8')) as {
    rootfs: { diff_ids: string[] };
  };
  return cfg.rootfs.diff_ids[layer]!;
}

describe('verifyFromLocal: DiffID and chunks from the local compressed copy, no network', () => {
  it.each([
    [
      'vector A (eStargz)',
      VECTOR_A,
      'sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618',
      6656,
    ],
    [
      'vector B (zstd:chunked)',
      VECTOR_B,
      'sha256:ee484253ce22b6ece91f77f3bd461abcd602337ea94aa6ba684270b5cb455524',
      6656,
    ],
  ] as const)('%s matches its documented DiffID and verifies every chunk', async (_n, path, diffID, size) => {
    const blob = await readFile(path);
    const { chunks, compression } = await chunksOf(blob);
    expect(chunks.length).toBeGreaterThan(0);
    const local = await storeBlob(blob);
    const sink = new Sink();
    const verified: string[] = [];
    const r = await verifyFromLocal({
      blob: local,
      compression,
      expectedDiffID: diffID,
      chunks,
      cache: sink,
      windowBytes: 100, // many windows: exercises window extension over chunk spans
      onVerified: (c) => verified.push(c.digest),
    });
    expect(r.matched).toBe(true);
    expect(r.chunkErrors).toBe(0);
    if (compression === 'zstd') expect(r.stream?.size).toBe(size);
    expect(new Set(verified)).toEqual(new Set(chunks.map((c) => c.digest)));
    expect(sink.got.size).toBe(new Set(chunks.map((c) => c.digest)).size);
  });

  it.each([
    ['estargz', 'layer0-d1a242188a5d.tar.gz', 0],
    ['esgz-opt', 'layer0-9046621451f5.tar.gz', 0],
    ['zstd-chunked', 'layer0-9b70c3633ed7.tar.zst', 0],
    ['ctr-zstdchunked', 'layer1-bab66c17883e.tar.zst', 1],
  ] as const)('real %s blob %s matches the config diff_id', async (sample, file, layer) => {
    const blob = await readFile(join(SAMPLES_TINY, sample, file));
    const { chunks, compression } = await chunksOf(blob);
    const local = await storeBlob(blob);
    const r = await verifyFromLocal({
      blob: local,
      compression,
      expectedDiffID: await diffIdOf(sample, layer),
      chunks,
      cache: new Sink(),
      windowBytes: 64 * 1024,
    });
    expect(r).toMatchObject({ matched: true, chunkErrors: 0 });
  });

  it('a wrong diff_id is reported as a mismatch with the actual digest', async () => {
    const blob = await readFile(VECTOR_A);
    const { chunks, compression } = await chunksOf(blob);
    const r = await verifyFromLocal({
      blob: await storeBlob(blob),
      compression,
      expectedDiffID: sha(Buffer.from('something else')),
      chunks,
      cache: new Sink(),
    });
    expect(r.matched).toBe(false);
    expect(r.stream?.digest).toBe('sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618');
    expect(r.chunkErrors).toBe(0);
  });

  it.each([
    ['eStargz', VECTOR_A, 'sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618'],
    ['zstd:chunked', VECTOR_B, 'sha256:ee484253ce22b6ece91f77f3bd461abcd602337ea94aa6ba684270b5cb455524'],
  ] as const)(
    '%s: damaged local bytes fail the check, name the bad span; after refetching it the check passes',
    async (_n, path, diffID) => {
      const blob = await readFile(path);
      const { chunks, compression } = await chunksOf(blob);
      // damage the middle of the largest chunk span
      const target = [...chunks].sort(
        (a, b) => b.compressedEnd - b.compressedOffset - (a.compressedEnd - a.compressedOffset),
      )[0]!;
      const at = Math.floor((target.compressedOffset + target.compressedEnd) / 2);
      const bad = Buffer.from(blob);
      bad[at] = bad[at]! ^ 0x55;
      const local = await store.openBlob(sha(blob), blob.length);
      await local.write(0, bad);
      const sink = new Sink();
      const r = await verifyFromLocal({
        blob: local,
        compression,
        expectedDiffID: diffID,
        chunks,
        cache: sink,
      });
      expect(r.matched).toBe(false);
      expect(r.chunkErrors).toBeGreaterThan(0);
      expect(r.badSpans.some((s) => s.start <= at && at < s.end)).toBe(true);
      expect([...sink.got.keys()]).not.toContain(target.digest);
      for (const s of r.badSpans) {
        await local.invalidate(s.start, s.end - s.start);
        await local.write(s.start, blob.subarray(s.start, s.end));
      }
      const again = await verifyFromLocal({
        blob: local,
        compression,
        expectedDiffID: diffID,
        chunks,
        cache: sink,
      });
      expect(again).toMatchObject({ matched: true, chunkErrors: 0 });
    },
  );

  it('refuses to run on an incomplete local copy, and stops on abort', async () => {
    const blob = await readFile(VECTOR_A);
    const { chunks, compression } = await chunksOf(blob);
    const partial = await store.openBlob(sha(blob), blob.length);
    await partial.write(0, blob.subarray(0, 100));
    await expect(
      verifyFromLocal({ blob: partial, compression, expectedDiffID: 'x', chunks, cache: new Sink() }),
    ).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    await partial.write(100, blob.subarray(100));
    const ac = new AbortController();
    ac.abort(new Error('stop'));
    await expect(
      verifyFromLocal({
        blob: partial,
        compression,
        expectedDiffID: 'x',
        chunks,
        cache: new Sink(),
        signal: ac.signal,
      }),
    ).rejects.toThrow('stop');
  });
});
