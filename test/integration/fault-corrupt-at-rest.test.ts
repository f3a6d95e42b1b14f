/**
 * Issue 14, corruption at rest: cached chunk files modified on disk (flipped byte, truncated,
 * emptied, replaced by another chunk's valid bytes) are detected when loaded, refetched from the
 * source and never served; the cache ends up holding the right bytes again.
 */
import { createHash } from 'node:crypto';
import { readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import type { TreeNode } from '../../src/format/model.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import { buildFaultBlob, openFaultLayer, TreeChecker } from '../helpers/fault-layer.js';
import { makeTarFixture, seededRandom, sizeMix } from './engine-helpers.js';

const CHUNK = 64 * 1024;
let work: string;
let tree: string;
let tarPath: string;

beforeAll(async () => {
  ({ work, tree, tarPath } = await makeTarFixture('fault-at-rest-', sizeMix(CHUNK, 30, seededRandom(7))));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

/** Counts the bytes fetched from the blob. */
class CountingSource {
  fetched = 0;
  constructor(private readonly inner: FileRangeReader) {}
  get size(): number {
    return this.inner.size;
  }
  async read(offset: number, length: number): Promise<Buffer> {
    this.fetched += length;
    return await this.inner.read(offset, length);
  }
  async close(): Promise<void> {
    await this.inner.close();
  }
}

const hex = (digest: string): string => digest.slice('sha256:'.length);

describe.each(['estargz', 'zstd:chunked'] as const)('corrupted cache files at rest (%s)', (format) => {
  it('are detected on load, refetched, never served', async () => {
    const blobPath = await buildFaultBlob(work, tarPath, format, CHUNK);
    const source = new CountingSource(await FileRangeReader.open(blobPath));
    const root = join(work, `root-${format.replace(':', '-')}`);
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 1 });
    await cache.whenScanned();
    const { index, layer } = await openFaultLayer({ source, cache, layerKey: `at-rest-${format}` });
    const files = index.nodes.filter(
      (n): n is TreeNode =>
        n !== undefined && n.type === 'reg' && n.chunks.some((c) => c.size > 100 && !c.zeros),
    );
    const check = new TreeChecker(layer, files, tree);
    try {
      await check.readAll();
      await cache.flush();
      const chunks = files.flatMap((n) => n.chunks.filter((c) => c.size > 100 && !c.zeros));
      const distinct = [...new Map(chunks.map((c) => [c.digest, c])).values()];
      expect(distinct.length).toBeGreaterThan(8);
      const damages: Array<(file: string, other: string) => Promise<void>> = [
        async (f) => {
          const b = await readFile(f);
          b[b.length >> 1] = b[b.length >> 1]! ^ 0x01;
          await writeFile(f, b);
        },
        async (f) => truncate(f, 17),
        async (f) => truncate(f, 0),
        // another chunk's valid bytes under this name
        async (f, other) => writeFile(f, await readFile(other)),
        async (f) => {
          const b = await readFile(f);
          await writeFile(f, Buffer.concat([b, Buffer.from('x')]));
        },
      ];
      const victims = distinct.slice(0, damages.length);
      for (let i = 0; i < victims.length; i++) {
        const file = cache.paths.chunkFile(hex(victims[i]!.digest));
        const other = cache.paths.chunkFile(hex(distinct[damages.length]!.digest));
        await damages[i]!(file, other);
      }
      const fetchedBefore = source.fetched;
      await check.readAll();
      await cache.flush();
      expect(check.wrong).toBe(0);
      expect(cache.stats().corrupt).toBe(victims.length);
      expect(source.fetched).toBeGreaterThan(fetchedBefore);
      // the refetched chunks were cached again, with the right bytes
      for (const c of victims) {
        const onDisk = await readFile(cache.paths.chunkFile(hex(c.digest)));
        expect('sha256:' + createHash('sha256').update(onDisk).digest('hex')).toBe(c.digest);
      }
      console.log(
        `${format}: ${victims.length} chunk files damaged at rest, ${cache.stats().corrupt} detected; ` +
          `${check.bytesChecked} bytes checked, ${check.wrong} wrong`,
      );
    } finally {
      await cache.close();
      await source.close();
    }
  });
});
