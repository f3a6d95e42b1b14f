/**
 * Lazy-layer engine benchmark (cache + LazyLayer), in one run:
 *  - cold and warm (memory / disk cache) read latency p50/p99 for 128 KiB random reads;
 *  - warm in-process throughput (sequential 128 KiB reads copied into a caller buffer, as FUSE does);
 *  - on-demand cold-read p50/p99 on an idle store vs while another layer is background-fetched
 *    (with its DiffID check), plus event-loop lag during the background pass;
 *  - bytes served by the blob server vs compressed bytes of the chunks actually needed, for a
 *    sparse access pattern.
 * The blob is served by a Range-capable HTTP server in a worker thread (its own event loop).
 * Targets: registry bytes <= 1.2x needed; warm throughput >= 1 GB/s; background raises the
 * on-demand p99 by <= 20 %.
 *
 *   npm run bench:engine [-- --size-mib 256 --chunk-kib 1024 --format estargz --reads 300
 *                            --think-ms 40 --quiet-ms 250
 *                            --stress-quiet-ms 20 --rtt-ms 0 --rounds 4]
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { Agent, request } from 'undici';
import { ChunkCache } from '../src/cache/index.js';
import type { LayerIndex, TreeNode } from '../src/format/model.js';
import { openLayer } from '../src/format/open-layer.js';
import { buildLayerToFile } from '../src/format/writer/index.js';
import { FetchScheduler, LazyLayer } from '../src/layer/index.js';
import type { RangeReader } from '../src/util/range-reader.js';
import { StoreError } from '../src/util/errors.js';
import { FileRangeReader } from '../src/util/range-reader.js';

interface Args {
  sizeMiB: number;
  chunkKiB: number;
  format: 'estargz' | 'zstd:chunked';
  reads: number;
  thinkMs: number;
  quietMs: number;
  stressQuietMs: number;
  rttMs: number;
  rounds: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    sizeMiB: 256,
    chunkKiB: 1024,
    format: 'estargz',
    reads: 300,
    thinkMs: 40,
    quietMs: 250,
    stressQuietMs: 20,
    rttMs: 0,
    rounds: 4,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i];
    const v = argv[i + 1] ?? '';
    if (k === '--format') {
      if (v !== 'estargz' && v !== 'zstd:chunked') throw new Error(`--format estargz|zstd:chunked, not ${v}`);
      a.format = v;
      continue;
    }
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new Error(`bad value for ${k}: ${v}`);
    if (k === '--size-mib') a.sizeMiB = n;
    else if (k === '--chunk-kib') a.chunkKiB = n;
    else if (k === '--reads') a.reads = n;
    else if (k === '--think-ms') a.thinkMs = n;
    else if (k === '--quiet-ms') a.quietMs = n;
    else if (k === '--stress-quiet-ms') a.stressQuietMs = n;
    else if (k === '--rtt-ms') a.rttMs = n;
    else if (k === '--rounds') a.rounds = n;
    else throw new Error(`unknown option ${k}`);
  }
  return a;
}

// ---------- blob server (worker thread, own event loop) ----------

const SERVER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const fs = require('node:fs');
const size = fs.statSync(workerData.path).size;
let requests = 0, bytes = 0;
const server = http.createServer((req, res) => {
  if (req.method === 'HEAD') { res.writeHead(200, { 'content-length': size }); res.end(); return; }
  const m = /^bytes=(\\d+)-(\\d+)$/.exec(req.headers.range || '');
  if (!m) { res.writeHead(400); res.end(); return; }
  const start = Number(m[1]), end = Math.min(Number(m[2]), size - 1);
  requests++; bytes += end - start + 1;
  const send = () => {
    res.writeHead(206, { 'content-length': end - start + 1, 'content-range': 'bytes ' + start + '-' + end + '/' + size });
    fs.createReadStream(workerData.path, { start, end }).pipe(res);
  };
  if (workerData.rttMs > 0) setTimeout(send, workerData.rttMs); else send();
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: server.address().port }));
parentPort.on('message', (m) => {
  if (m === 'stats') parentPort.postMessage({ requests, bytes });
  else if (m === 'reset') { requests = 0; bytes = 0; }
  else if (m === 'stop') server.close(() => process.exit(0));
});
`;

class BlobServer {
  private constructor(
    private readonly worker: Worker,
    readonly url: string,
  ) {}

  static async start(path: string, rttMs: number): Promise<BlobServer> {
    const worker = new Worker(SERVER_SOURCE, { eval: true, workerData: { path, rttMs } });
    const port = await new Promise<number>((resolve, reject) => {
      worker.once('message', (m: { port: number }) => resolve(m.port));
      worker.once('error', reject);
    });
    return new BlobServer(worker, `http://127.0.0.1:${port}/blob`);
  }

  async stats(): Promise<{ requests: number; bytes: number }> {
    const p = new Promise<{ requests: number; bytes: number }>((r) => this.worker.once('message', r));
    this.worker.postMessage('stats');
    return await p;
  }

  reset(): void {
    this.worker.postMessage('reset');
  }

  async stop(): Promise<void> {
    this.worker.postMessage('stop');
    await new Promise((r) => this.worker.once('exit', r));
  }
}

/** Blob source over HTTP Range requests (undici.request: Node streams, cheaper than fetch()). */
class HttpSource implements RangeReader {
  private readonly agent = new Agent({ connections: 64, keepAliveTimeout: 60_000 });

  constructor(
    private readonly url: string,
    readonly size: number,
  ) {}

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    if (length === 0) return Buffer.alloc(0);
    const res = await request(this.url, {
      dispatcher: this.agent,
      headers: { range: `bytes=${offset}-${offset + length - 1}` },
      ...(signal ? { signal } : {}),
    });
    const parts: Buffer[] = [];
    for await (const part of res.body) parts.push(part as Buffer);
    const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    if (res.statusCode !== 206 || body.length !== length) {
      throw new StoreError('E_REGISTRY_STATUS', `HTTP ${res.statusCode}, ${body.length} bytes`, {
        offset,
        length,
      });
    }
    return body;
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

// ---------- layer generation ----------

async function makeLayer(
  work: string,
  a: Args,
): Promise<{ blobPath: string; diffID: string; index: LayerIndex }> {
  const tree = join(work, 'tree');
  const chunk = a.chunkKiB * 1024;
  const total = a.sizeMiB * 1024 * 1024;
  const text = Buffer.from('lorem ipsum dolor sit amet, consectetur adipiscing elit 0123456789\n');
  let written = 0;
  for (let i = 0; written < total; i++) {
    const r = Math.random();
    // small files, files below one chunk, and files of up to 9 chunks
    const size = Math.min(
      total - written,
      r < 0.5
        ? Math.floor(Math.random() * 32 * 1024)
        : r < 0.85
          ? Math.floor(Math.random() * chunk)
          : Math.floor(Math.random() * 9 * chunk),
    );
    let data: Buffer;
    if (i % 2 === 0) data = randomBytes(size);
    else {
      data = Buffer.alloc(size);
      for (let o = 0; o < size; o += text.length) text.copy(data, o);
      for (let o = 0; o < size; o += 997) data[o] = (i + o) & 0xff;
    }
    await mkdir(join(tree, `d${i % 23}`), { recursive: true });
    await writeFile(join(tree, `d${i % 23}`, `f${i}`), data);
    written += size;
  }
  const tar = join(work, 'layer.tar');
  execFileSync('tar', ['-cf', tar, '-C', tree, '.']);
  const blobPath = join(work, 'layer.blob');
  const r = await buildLayerToFile(tar, blobPath, {
    format: a.format,
    chunkSize: chunk,
    gzipLevel: 6,
    zstdLevel: 3,
  });
  await rm(tree, { recursive: true, force: true });
  await rm(tar, { force: true });
  const local = await FileRangeReader.open(blobPath);
  const index = await openLayer(local);
  await local.close();
  return { blobPath, diffID: r.diffID, index };
}

// ---------- helpers ----------

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

function summary(samples: number[]): { p50: number; p99: number; n: number } {
  const s = [...samples].sort((x, y) => x - y);
  return { p50: pct(s, 0.5), p99: pct(s, 0.99), n: s.length };
}

const ms = (x: number): string => `${x.toFixed(2)} ms`;
const sleep = (t: number): Promise<void> => new Promise((r) => setTimeout(r, t));

interface ReadOp {
  node: TreeNode;
  offset: number;
  length: number;
}

/** `n` reads of `length` bytes, each inside a different chunk (so every one is a miss when cold). */
function distinctChunkReads(files: TreeNode[], n: number, length: number): ReadOp[] {
  const all: ReadOp[] = [];
  for (const node of files) {
    for (const c of node.chunks) {
      if (c.zeros) continue;
      const span = Math.max(0, c.size - length);
      all.push({
        node,
        offset: c.fileOffset + Math.floor(Math.random() * (span + 1)),
        length: Math.min(length, c.size),
      });
    }
  }
  for (let i = all.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  return all.slice(0, n);
}

function randomReads(files: TreeNode[], n: number, length: number): ReadOp[] {
  const big = files.filter((f) => f.size > 0);
  return Array.from({ length: n }, () => {
    const node = big[Math.floor(Math.random() * big.length)]!;
    return { node, offset: Math.floor(Math.random() * node.size), length };
  });
}

async function timedReads(layer: LazyLayer, ops: ReadOp[], thinkMs = 0): Promise<number[]> {
  const out: number[] = [];
  for (const op of ops) {
    const t0 = performance.now();
    await layer.read(op.node, op.offset, op.length);
    out.push(performance.now() - t0);
    if (thinkMs > 0) await sleep(Math.random() * thinkMs);
  }
  return out;
}

// ---------- main ----------

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const work = await mkdtemp(join(tmpdir(), 'bench-engine-'));
  const caches: ChunkCache[] = [];
  const newCache = async (memoryBytes = 256 * 1024 * 1024): Promise<ChunkCache> => {
    const c = await ChunkCache.open({
      root: await mkdtemp(join(work, 'root-')),
      minFreeBytes: 0,
      memoryBytes,
    });
    caches.push(c);
    return c;
  };
  /** Release a cache's memory and files so later measurements start from the same state. */
  const dropCache = async (c: ChunkCache): Promise<void> => {
    await c.close();
    c.dropMemory();
    caches.splice(caches.indexOf(c), 1);
    await rm(c.paths.base, { recursive: true, force: true });
  };
  let server: BlobServer | undefined;
  let source: HttpSource | undefined;
  try {
    console.log(
      `load average before: ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')} (${cpus().length} CPUs)`,
    );
    console.log(`building a ${a.sizeMiB} MiB ${a.format} layer (chunk ${a.chunkKiB} KiB) ...`);
    const t0 = performance.now();
    const { blobPath, diffID, index } = await makeLayer(work, a);
    const files = index.nodes.filter((n): n is TreeNode => n !== undefined && n.type === 'reg');
    console.log(
      `  ${files.length} files, blob ${(index.blobSize / 2 ** 20).toFixed(1)} MiB, built in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
    server = await BlobServer.start(blobPath, a.rttMs);
    source = new HttpSource(server.url, index.blobSize);
    const src = source;
    const mkLayer = (
      cache: ChunkCache,
      scheduler: FetchScheduler,
      extra: Partial<ConstructorParameters<typeof LazyLayer>[0]> = {},
    ) =>
      new LazyLayer({
        index,
        source: src,
        cache,
        layerKey: 'bench',
        scheduler,
        backgroundFetch: false,
        prefetch: false,
        ...extra,
      });
    const results: Record<string, unknown> = { args: a, blobBytes: index.blobSize, files: files.length };

    // 1. cold / warm latency
    {
      const cache = await newCache();
      const layer = mkLayer(cache, new FetchScheduler({ quietMs: a.quietMs }));
      const ops = distinctChunkReads(files, a.reads, 128 * 1024);
      const cold = summary(await timedReads(layer, ops));
      const warmMem = summary(await timedReads(layer, ops));
      await cache.flush();
      cache.dropMemory();
      const warmDisk = summary(await timedReads(layer, ops));
      console.log('\nread latency, 128 KiB random reads (single reader):');
      console.log(`  cold (fetch+decode+verify): p50 ${ms(cold.p50)}  p99 ${ms(cold.p99)}  (n=${cold.n})`);
      console.log(`  warm, memory cache:         p50 ${ms(warmMem.p50)}  p99 ${ms(warmMem.p99)}`);
      console.log(`  warm, disk cache:           p50 ${ms(warmDisk.p50)}  p99 ${ms(warmDisk.p99)}`);
      Object.assign(results, { cold, warmMem, warmDisk });
      await dropCache(cache);
    }

    // 2. warm throughput (whole layer in memory; sequential 128 KiB reads copied out, like FUSE)
    {
      const totalPlain = files.reduce((s, f) => s + f.size, 0);
      const cache = await newCache(Math.max(512 * 1024 * 1024, totalPlain * 2));
      const layer = mkLayer(cache, new FetchScheduler({ quietMs: a.quietMs }));
      for (const f of files) if (f.size > 0) await layer.read(f, 0, f.size);
      const dst = Buffer.allocUnsafe(128 * 1024);
      const rates: number[] = [];
      for (let round = 0; round < 3; round++) {
        let bytes = 0;
        const t = performance.now();
        for (const f of files) {
          for (let off = 0; off < f.size; off += dst.length) {
            const b = await layer.read(f, off, dst.length);
            b.copy(dst);
            bytes += b.length;
          }
        }
        rates.push(bytes / ((performance.now() - t) / 1000));
      }
      // the same from the disk cache (memory LRU too small to help)
      await cache.flush();
      const diskCache = await ChunkCache.open({
        root: cache.paths.base.replace(/\/cache$/, ''),
        minFreeBytes: 0,
        memoryBytes: 1,
      });
      caches.push(diskCache);
      await diskCache.whenScanned();
      const diskLayer = mkLayer(diskCache, new FetchScheduler({ quietMs: a.quietMs }));
      let bytes = 0;
      const t = performance.now();
      for (const f of files) {
        // one read per chunk: each one re-reads and re-hashes a cache file
        for (const c of f.chunks) {
          const b = await diskLayer.read(f, c.fileOffset, c.size);
          bytes += b.length;
        }
      }
      const diskRate = bytes / ((performance.now() - t) / 1000);
      const best = Math.max(...rates);
      console.log('\nwarm throughput (in process):');
      console.log(
        `  memory cache, 128 KiB reads + copy: ${(best / 1e9).toFixed(2)} GB/s (rounds: ${rates.map((r) => (r / 1e9).toFixed(2)).join(', ')})`,
      );
      console.log(`  disk cache, chunk-sized reads (sha256-verified): ${(diskRate / 1e9).toFixed(2)} GB/s`);
      Object.assign(results, { warmThroughputGBps: best / 1e9, diskThroughputGBps: diskRate / 1e9 });
      await dropCache(diskCache);
      await dropCache(cache);
    }

    // 3. on-demand latency with and without background fetch on another layer; rounds interleave
    //    the two conditions so load changes on the machine hit both alike. Run with the library's
    //    default quiet period and with a short one (background resumes between most reads).
    const compare = async (quietMs: number, label: string): Promise<void> => {
      const idle: number[] = [];
      const withBg: number[] = [];
      const idleP99: number[] = [];
      const bgP99: number[] = [];
      let lagP99 = 0;
      let lagMax = 0;
      let bgBytes = 0;
      const n = Math.max(50, Math.floor(a.reads / 2));
      const runIdle = async (ops: ReadOp[]): Promise<void> => {
        const cache = await newCache();
        const layer = mkLayer(cache, new FetchScheduler({ quietMs }));
        // same preamble as with background: 'quiet + 50' ms of nothing before the reads
        await sleep(Math.max(50, quietMs + 50));
        const t = await timedReads(layer, ops, a.thinkMs);
        idle.push(...t);
        idleP99.push(summary(t).p99);
        await dropCache(cache);
      };
      const runBg = async (ops: ReadOp[]): Promise<void> => {
        const scheduler = new FetchScheduler({ quietMs });
        const cache = await newCache();
        const bgCache = await newCache();
        const layer = mkLayer(cache, scheduler);
        const bg = mkLayer(bgCache, scheduler, {
          backgroundFetch: true,
          expectedDiffID: diffID,
          layerKey: 'bench-bg',
        });
        const lag = monitorEventLoopDelay({ resolution: 5 });
        lag.enable();
        bg.start();
        await sleep(Math.max(50, quietMs + 50));
        const before = bg.state().bytesFetched;
        const t = await timedReads(layer, ops, a.thinkMs);
        lag.disable();
        bgBytes = Math.max(bgBytes, bg.state().bytesFetched - before);
        await bg.close();
        withBg.push(...t);
        bgP99.push(summary(t).p99);
        lagP99 = Math.max(lagP99, lag.percentile(99) / 1e6);
        lagMax = Math.max(lagMax, lag.max / 1e6);
        await dropCache(cache);
        await dropCache(bgCache);
      };
      for (let round = 0; round < a.rounds; round++) {
        const ops = distinctChunkReads(files, n, 128 * 1024);
        // alternate the order so drift on the machine does not favour one condition
        if (round % 2 === 0) {
          await runIdle(ops);
          await runBg(ops);
        } else {
          await runBg(ops);
          await runIdle(ops);
        }
      }
      const si = summary(idle);
      const sb = summary(withBg);
      const ratio = sb.p99 / si.p99;
      console.log(
        `\non-demand cold 128 KiB reads, ${label}: quiet ${quietMs} ms, think time 0-${a.thinkMs} ms, ${a.rounds} rounds x ${n}:`,
      );
      console.log(
        `  idle store:          p50 ${ms(si.p50)}  p99 ${ms(si.p99)}  (per-round p99: ${idleP99.map(ms).join(', ')})`,
      );
      console.log(
        `  background running:  p50 ${ms(sb.p50)}  p99 ${ms(sb.p99)}  (per-round p99: ${bgP99.map(ms).join(', ')})`,
      );
      console.log(
        `  p99 ratio ${ratio.toFixed(2)} (target <= 1.20); background fetched up to ${(bgBytes / 2 ** 20).toFixed(1)} MiB ` +
          `during a round's reads; event-loop lag p99 ${ms(lagP99)} max ${ms(lagMax)}`,
      );
      results[`onDemand_quiet${quietMs}`] = {
        idle: si,
        withBackground: sb,
        p99Ratio: ratio,
        backgroundBytesDuringReads: bgBytes,
      };
    };
    {
      await compare(a.quietMs, 'default quiet period');
      await compare(a.stressQuietMs, 'stress (short quiet period)');

      // one uninterrupted background pass to completion (DiffID check), with its event-loop lag
      const scheduler = new FetchScheduler({ quietMs: a.quietMs });
      const bg = mkLayer(await newCache(), scheduler, {
        backgroundFetch: true,
        expectedDiffID: diffID,
        layerKey: 'bench-bg2',
      });
      const lag = monitorEventLoopDelay({ resolution: 5 });
      const elu0 = performance.eventLoopUtilization();
      lag.enable();
      const t = performance.now();
      bg.start();
      await bg.whenBackgroundDone();
      lag.disable();
      const elu = performance.eventLoopUtilization(elu0).utilization;
      const secs = (performance.now() - t) / 1000;
      const verified = bg.state().fullyVerified;
      console.log('\nbackground fetch alone (whole layer + DiffID check):');
      console.log(
        `  ${secs.toFixed(1)} s, ${(index.blobSize / secs / 1e6).toFixed(0)} MB/s compressed, fullyVerified=${verified}, ` +
          `event-loop lag p99 ${ms(lag.percentile(99) / 1e6)} max ${ms(lag.max / 1e6)}, main-thread utilisation ${(elu * 100).toFixed(0)} %`,
      );
      Object.assign(results, {
        backgroundSeconds: secs,
        backgroundVerified: verified,
        backgroundLagP99Ms: lag.percentile(99) / 1e6,
        backgroundElu: elu,
      });
    }

    // 4. sparse access: bytes from the server vs compressed bytes of the chunks needed
    {
      const cache = await newCache();
      const layer = mkLayer(cache, new FetchScheduler({ quietMs: a.quietMs }));
      const ops = randomReads(files, Math.max(20, Math.floor(a.reads / 3)), 4096);
      const needed = new Map<string, number>();
      for (const op of ops) {
        for (const c of op.node.chunks) {
          if (c.fileOffset < op.offset + op.length && c.fileOffset + c.size > op.offset && !c.zeros) {
            needed.set(`${c.compressedOffset}:${c.compressedEnd}`, c.compressedEnd - c.compressedOffset);
          }
        }
      }
      server.reset();
      await sleep(20);
      await Promise.all(ops.map((op) => layer.read(op.node, op.offset, op.length)));
      const st = await server.stats();
      const need = [...needed.values()].reduce((s, v) => s + v, 0);
      console.log(`\nsparse access (${ops.length} random 4 KiB reads, concurrent):`);
      console.log(
        `  server bytes ${(st.bytes / 2 ** 20).toFixed(2)} MiB in ${st.requests} requests; needed chunk bytes ${(need / 2 ** 20).toFixed(2)} MiB; ` +
          `ratio ${(st.bytes / need).toFixed(3)} (target <= 1.20); ${((100 * st.bytes) / index.blobSize).toFixed(1)} % of the blob`,
      );
      Object.assign(results, {
        sparseServerBytes: st.bytes,
        sparseNeededBytes: need,
        sparseRatio: st.bytes / need,
      });
    }
    console.log(
      `\nload average after: ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`,
    );
    console.log('\n' + JSON.stringify(results));
  } finally {
    for (const c of caches) await c.close().catch(() => undefined);
    await source?.close();
    await server?.stop();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
