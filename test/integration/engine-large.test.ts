/**
 * A synthetic layer of more than 1 GiB (hundreds of files, sizes from 0 to more than 8 chunks),
 * tarred by GNU tar and converted by our writer, served over HTTP with Range: 32 concurrent
 * readers x 1000 random reads, cold, then the same reads warm (from the disk cache, zero
 * requests). Every byte is compared with the source files.
 */
import { mkdtemp, open, rm, stat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import type { TreeNode } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { buildLayerToFile } from '../../src/format/writer/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import {
  HttpRangeSource,
  makeTarFixture,
  seededRandom,
  sizeMix,
  startRangeServer,
} from './engine-helpers.js';

const CHUNK = 1024 * 1024;
const GIB = 1024 ** 3;
const READERS = 32;
const READS = 1000;

let work: string;
let tree: string;
let tarPath: string;
let treeBytes = 0;

beforeAll(async () => {
  const rand = seededRandom(7);
  const sizes = sizeMix(CHUNK, 20, rand);
  while (sizes.reduce((a, b) => a + b, 0) < GIB + 16 * CHUNK)
    sizes.push(...sizeMix(CHUNK, 20, rand).slice(14));
  treeBytes = sizes.reduce((a, b) => a + b, 0);
  ({ work, tree, tarPath } = await makeTarFixture('engine-large-', sizes));
}, 600_000);
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

interface Read {
  node: TreeNode;
  offset: number;
  length: number;
}

describe.each(['estargz', 'zstd:chunked'] as const)('1 GiB synthetic layer (%s)', (format) => {
  it('32 readers x 1000 random reads, cold then warm, zero mismatches', { timeout: 900_000 }, async () => {
    const blobPath = join(work, `${format.replace(':', '-')}.blob`);
    await buildLayerToFile(tarPath, blobPath, { format, chunkSize: CHUNK, gzipLevel: 1, zstdLevel: 1 });
    const local = await FileRangeReader.open(blobPath);
    const index = await openLayer(local);
    await local.close();
    const files = index.nodes.filter(
      (n): n is TreeNode => n !== undefined && n.type === 'reg' && !n.path.includes('landmark'),
    );
    const total = files.reduce((a, n) => a + n.size, 0);
    expect(total).toBe(treeBytes);
    expect(total).toBeGreaterThan(GIB);
    expect(Math.max(...files.map((n) => n.chunks.length))).toBeGreaterThan(8);
    expect(files.some((n) => n.size === 0)).toBe(true);

    const handles = new Map<string, FileHandle>();
    for (const n of files) handles.set(n.path, await open(join(tree, n.path), 'r'));
    const expectedSlice = async (r: Read): Promise<Buffer> => {
      const len = Math.max(0, Math.min(r.length, r.node.size - r.offset));
      const buf = Buffer.alloc(len);
      if (len > 0) await handles.get(r.node.path)!.read(buf, 0, len, r.offset);
      return buf;
    };

    let seed = 99;
    const rand = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const plan: Read[][] = Array.from({ length: READERS }, () =>
      Array.from({ length: READS }, () => {
        const node = files[Math.floor(rand() * files.length)]!;
        const offset = Math.floor(rand() * (node.size + 1));
        const r = rand();
        const length =
          r < 0.05 ? 0 : r < 0.75 ? Math.floor(rand() * 128 * 1024) : Math.floor(rand() * 3 * CHUNK);
        return { node, offset, length };
      }),
    );

    const server = await startRangeServer(blobPath);
    const root = await mkdtemp(join(work, 'root-'));
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const source = new HttpRangeSource(server.url, index.blobSize);
    const layer = new LazyLayer({
      index,
      source,
      cache,
      layerKey: `large-${format}`,
      backgroundFetch: false,
      prefetch: false,
      scheduler: new FetchScheduler({ quietMs: 0 }),
    });
    const run = async (): Promise<{ mismatches: string[]; ms: number; bytes: number }> => {
      const mismatches: string[] = [];
      let bytes = 0;
      const t0 = performance.now();
      await Promise.all(
        plan.map(async (reads) => {
          for (const r of reads) {
            const got = await layer.read(r.node, r.offset, r.length);
            bytes += got.length;
            if (!got.equals(await expectedSlice(r)))
              mismatches.push(`${r.node.path}@${r.offset}+${r.length}`);
          }
        }),
      );
      return { mismatches, ms: performance.now() - t0, bytes };
    };
    try {
      const cold = await run();
      expect(cold.mismatches).toEqual([]);
      const coldRequests = source.requests;
      expect(coldRequests).toBeGreaterThan(0);
      await cache.flush();
      cache.dropMemory();
      const warm = await run();
      expect(warm.mismatches).toEqual([]);
      expect(source.requests).toBe(coldRequests);
      const blobSize = (await stat(blobPath)).size;
      console.info(
        `${format}: blob ${(blobSize / 2 ** 20).toFixed(0)} MiB, files ${files.length}, ` +
          `cold ${READERS}x${READS} reads ${(cold.ms / 1000).toFixed(1)} s (${source.requests} requests, ` +
          `${(server.bytes / 2 ** 20).toFixed(0)} MiB fetched), warm ${(warm.ms / 1000).toFixed(1)} s, ` +
          `${(warm.bytes / 2 ** 20).toFixed(0)} MiB returned per pass`,
      );
    } finally {
      await cache.close();
      await server.close();
      for (const h of handles.values()) await h.close();
      await rm(root, { recursive: true, force: true });
      await rm(blobPath, { force: true });
    }
  });
});
