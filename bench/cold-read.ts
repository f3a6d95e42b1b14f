/**
 * Cold sequential read of the largest file of a layer blob, in process: LazyLayer + FileReadAhead
 * (the store's read path without FUSE and without HTTP: the blob is read from a local file), 128 KiB
 * reads with `--depth` in flight, like the kernel's FUSE reads. Prints MB/s, CPU ms per MB (all
 * threads, system share, main thread) and the process's peak RSS (VmHWM), so two builds can be
 * compared on a shared machine by CPU cost as well as by speed.
 *
 *   npm run build && node dist/bench/cold-read.js <blob file> [--depth 4]
 * (e.g. a layer blob from a registry's storage: .../blobs/sha256/xx/<digest>/data)
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../src/cache/index.js';
import type { TreeNode } from '../src/format/model.js';
import { openLayer } from '../src/format/open-layer.js';
import { FetchScheduler, LazyLayer } from '../src/layer/index.js';
import {
  chunkEndOf,
  DEFAULT_READ_AHEAD,
  FileReadAhead,
  fitToMemory,
  ReadAheadBudget,
} from '../src/layer/read-ahead.js';
import { FileRangeReader } from '../src/util/range-reader.js';

const READ = 128 * 1024;

function peakRssMiB(): number {
  const m = /VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

async function main(): Promise<void> {
  const [blob, flag, value] = process.argv.slice(2);
  if (blob === undefined) throw new Error('usage: cold-read <blob file> [--depth N]');
  const depth = flag === '--depth' ? Number(value) : 4;
  const src = await FileRangeReader.open(blob);
  const index = await openLayer(src);
  const file = index.nodes
    .filter((n): n is TreeNode => n !== undefined && n.type === 'reg')
    .sort((a, b) => b.size - a.size)[0];
  if (file === undefined) throw new Error('the layer has no regular file');
  const root = await mkdtemp(join(tmpdir(), 'cold-read-'));
  const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
  const layer = new LazyLayer({
    index,
    source: src,
    cache,
    layerKey: 'sha256:' + 'c'.repeat(64),
    scheduler: new FetchScheduler({ quietMs: 60_000 }),
    backgroundFetch: false,
    prefetch: false,
  });
  const policy = fitToMemory(DEFAULT_READ_AHEAD, cache.memoryLimit);
  const ahead = new FileReadAhead(file.size, (o, l, s) => layer.prefetchRange(file, o, l, s), {
    policy,
    budget: new ReadAheadBudget(policy.maxInflightBytes * 2),
    chunkEnd: chunkEndOf(file.chunks),
  });
  const dst = Buffer.allocUnsafe(READ);
  const cpu0 = process.cpuUsage();
  const main0 = process.threadCpuUsage?.();
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: depth }, async () => {
      while (next < file.size) {
        const off = next;
        next += READ;
        ahead.onRead(off, READ);
        (await layer.read(file, off, READ)).copy(dst);
      }
    }),
  );
  const s = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const mainCpu = main0 === undefined ? undefined : process.threadCpuUsage(main0);
  ahead.close();
  const mb = file.size / 1e6;
  const perMB = (us: number): string => (us / 1e3 / mb).toFixed(2);
  console.log(
    `${file.path}: ${(file.size / 2 ** 20).toFixed(0)} MiB, ${index.compression}, ${(mb / s).toFixed(1)} MB/s; ` +
      `CPU ${perMB(cpu.user + cpu.system)} ms/MB (system ${perMB(cpu.system)}` +
      `${mainCpu === undefined ? '' : `, main thread ${perMB(mainCpu.user + mainCpu.system)}`}); ` +
      `peak RSS ${peakRssMiB().toFixed(0)} MiB; chunk files written ${cache.stats().writes}`,
  );
  await layer.close();
  await cache.close();
  await src.close();
  await rm(root, { recursive: true, force: true });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
