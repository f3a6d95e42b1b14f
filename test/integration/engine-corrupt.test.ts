/**
 * A server that corrupts one chunk: reads touching that chunk fail with a verification error,
 * every other read returns the right bytes, and nothing corrupted reaches the cache (every cache
 * file is checked with the system's sha256sum against its name).
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { buildLayerToFile } from '../../src/format/writer/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import {
  expectedFile,
  HttpRangeSource,
  makeTarFixture,
  sizeMix,
  startRangeServer,
} from './engine-helpers.js';

const CHUNK = 64 * 1024;
let work: string;
let tree: string;
let tarPath: string;

beforeAll(async () => {
  ({ work, tree, tarPath } = await makeTarFixture('engine-corrupt-', sizeMix(CHUNK, 60)));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

async function cacheFiles(root: string): Promise<Array<{ name: string; sum: string }>> {
  const base = join(root, 'cache', 'chunks', 'sha256');
  const out: Array<{ name: string; sum: string }> = [];
  for (const d of await readdir(base)) {
    for (const f of await readdir(join(base, d))) {
      const sum = execFileSync('sha256sum', [join(base, d, f)])
        .toString()
        .split(' ')[0]!;
      out.push({ name: f, sum });
    }
  }
  return out;
}

describe.each(['estargz', 'zstd:chunked'] as const)('corrupted chunk from the server (%s)', (format) => {
  it('fails only the reads that touch it and never caches it', async () => {
    const blobPath = join(work, `${format.replace(':', '-')}.blob`);
    await buildLayerToFile(tarPath, blobPath, { format, chunkSize: CHUNK, gzipLevel: 1 });
    const local = await FileRangeReader.open(blobPath);
    const index = await openLayer(local);
    await local.close();
    const server = await startRangeServer(blobPath);
    const root = await mkdtemp(join(work, 'root-'));
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 1 });
    try {
      // the 4th chunk of the first file with at least 5 chunks
      const victim = index.nodes.find((n) => n !== undefined && n.type === 'reg' && n.chunks.length >= 5)!;
      const bad = victim.chunks[3]!;
      server.corrupt.add(Math.floor((bad.compressedOffset + bad.compressedEnd) / 2));
      const layer = new LazyLayer({
        index,
        source: new HttpRangeSource(server.url, index.blobSize),
        cache,
        layerKey: 'corrupt-test',
        backgroundFetch: false,
        prefetch: false,
        scheduler: new FetchScheduler({ quietMs: 0 }),
      });
      let ok = 0;
      let failed = 0;
      for (const n of index.nodes) {
        if (n === undefined || n.type !== 'reg') continue;
        const want = await expectedFile(tree, n.path);
        for (const c of n.chunks) {
          const touchesBad = c.digest === bad.digest;
          const res = await layer.read(n, c.fileOffset, c.size).then(
            (b) => ({ b }),
            (e: unknown) => ({ e }),
          );
          if (touchesBad) {
            expect('e' in res, `${n.path}@${c.fileOffset} must fail`).toBe(true);
            expect((res as { e: { code: string } }).e.code).toMatch(
              /^E_(DIGEST_MISMATCH|DECOMPRESS|TRUNCATED)$/,
            );
            failed++;
          } else {
            expect('b' in res, `${n.path}@${c.fileOffset} must succeed`).toBe(true);
            expect((res as { b: Buffer }).b.equals(want.subarray(c.fileOffset, c.fileOffset + c.size))).toBe(
              true,
            );
            ok++;
          }
        }
        // whole-file read: fails exactly when the file contains the bad chunk
        const whole = await layer.read(n, 0, n.size).then(
          (b) => b,
          () => undefined,
        );
        if (n.chunks.some((c) => c.digest === bad.digest)) expect(whole).toBeUndefined();
        else expect(whole?.equals(want)).toBe(true);
      }
      expect(failed).toBeGreaterThan(0);
      expect(ok).toBeGreaterThan(50);
      await cache.flush();
      const files = await cacheFiles(root);
      expect(files.length).toBeGreaterThan(50);
      for (const f of files) expect(f.sum).toBe(f.name);
      expect(files.map((f) => 'sha256:' + f.name)).not.toContain(bad.digest);
      // once the server is healthy again the chunk is fetched and served
      server.corrupt.clear();
      const fixed = await layer.read(victim, bad.fileOffset, bad.size);
      expect(
        fixed.equals(
          (await expectedFile(tree, victim.path)).subarray(bad.fileOffset, bad.fileOffset + bad.size),
        ),
      ).toBe(true);
    } finally {
      await cache.close();
      await server.close();
    }
  });
});
