/**
 * Disk bound: with maxBytes = 25% of a layer, reading the whole layer twice succeeds (exact bytes)
 * and the disk usage never exceeds the bound plus one chunk. The cache root is a dedicated tmpfs,
 * so statfs gives an atomic, independent measure of the bytes in use (a directory walk can count
 * an evicted file and its replacement together).
 */
import { execFileSync } from 'node:child_process';
import { mkdir, readdir, rm, stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { buildLayerToFile } from '../../src/format/writer/index.js';
import { FetchScheduler, LazyLayer, planLayerAsync } from '../../src/layer/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import {
  expectedFile,
  HttpRangeSource,
  makeTarFixture,
  seededRandom,
  sizeMix,
  startRangeServer,
} from './engine-helpers.js';

const CHUNK = 1024 * 1024;
let work: string;
let tree: string;
let tarPath: string;

beforeAll(async () => {
  ({ work, tree, tarPath } = await makeTarFixture('engine-bounds-', sizeMix(CHUNK, 40, seededRandom(42))));
});
afterAll(async () => {
  try {
    execFileSync('umount', [join(work, 'mnt')], { stdio: 'ignore' });
  } catch {
    // not mounted (the test failed before mounting)
  }
  await rm(work, { recursive: true, force: true });
});

async function used(dir: string): Promise<number> {
  const s = await statfs(dir);
  return (s.blocks - s.bfree) * s.bsize;
}

async function usage(dir: string): Promise<{ apparent: number; allocated: number }> {
  let apparent = 0;
  let allocated = 0;
  const walk = async (d: string): Promise<void> => {
    for (const name of await readdir(d).catch(() => [] as string[])) {
      const st = await stat(join(d, name)).catch(() => undefined);
      if (st === undefined) continue;
      if (st.isDirectory()) await walk(join(d, name));
      else {
        apparent += st.size;
        allocated += st.blocks * 512;
      }
    }
  };
  await walk(dir);
  return { apparent, allocated };
}

describe('disk bound under a full-layer read', () => {
  it('stays within 25% of the layer (+1 chunk) while reading everything twice', async () => {
    const blobPath = join(work, 'layer.blob');
    await buildLayerToFile(tarPath, blobPath, { format: 'estargz', chunkSize: CHUNK, gzipLevel: 1 });
    const local = await FileRangeReader.open(blobPath);
    const index = await openLayer(local);
    await local.close();
    const layerBytes = (await planLayerAsync(index)).totalChunkBytes;
    expect(layerBytes).toBeGreaterThan(40 * CHUNK);
    const bound = Math.floor(layerBytes / 4);
    const server = await startRangeServer(blobPath);
    const root = join(work, 'mnt');
    await mkdir(root);
    // fails loudly (no skip) when tmpfs cannot be mounted
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${bound * 2 + 64 * CHUNK}`, 'tmpfs', root]);
    expect(await used(root)).toBe(0);
    const cache = await ChunkCache.open({ root, maxBytes: bound, minFreeBytes: 0, memoryBytes: 2 * CHUNK });
    let peak = 0;
    let samples = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, await used(root));
        samples++;
        await new Promise((r) => setImmediate(r));
      }
    })();
    try {
      const layer = new LazyLayer({
        index,
        source: new HttpRangeSource(server.url, index.blobSize),
        cache,
        layerKey: 'bounds-test',
        backgroundFetch: false,
        prefetch: false,
        scheduler: new FetchScheduler({ quietMs: 0 }),
      });
      for (let pass = 0; pass < 2; pass++) {
        for (const n of index.nodes) {
          if (n === undefined || n.type !== 'reg') continue;
          const want = await expectedFile(tree, n.path);
          for (let off = 0; off < n.size; off += 256 * 1024) {
            const got = await layer.read(n, off, 256 * 1024);
            expect(got.equals(want.subarray(off, off + 256 * 1024)), `${n.path}@${off}`).toBe(true);
          }
        }
      }
      await cache.flush();
    } finally {
      sampling = false;
      await sampler;
      await server.close();
    }
    const st = cache.stats();
    await cache.close();
    expect(st.evictions).toBeGreaterThan(0);
    expect(st.diskBytes).toBeLessThanOrEqual(bound);
    console.info(`disk bound ${bound} B, peak tmpfs usage ${peak} B over ${samples} samples`);
    expect(samples).toBeGreaterThan(100);
    expect(peak).toBeGreaterThan(bound / 2);
    expect(peak).toBeLessThanOrEqual(bound + CHUNK);
    // and what is left on disk agrees (directory walk, apparent and allocated sizes)
    const left = await usage(join(root, 'cache'));
    expect(left.apparent).toBeLessThanOrEqual(bound);
    expect(left.allocated).toBeLessThanOrEqual(bound);
  });
});
