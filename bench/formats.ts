/**
 * Formats benchmark: decode+verify throughput of every chunk of a 256 MiB synthetic layer through
 * `decodeChunk` (worker pool, concurrency = pool size), against baselines measured in the same
 * run on the same spans: Node's `zlib.gunzip` + sha256 (gzip) and zstd-napi `decompress` +
 * sha256 (zstd). Targets: gzip >= 0.85x its baseline, zstd >= 400 MB/s.
 * Also, same run, same spans: Node's built-in zstd (`zlib.zstdDecompressSync`, Node >= 22.15) against
 * zstd-napi, decompress (+ sha256) and compress at level 3, to decide whether the native module can go
 * (it can when the built-in is within 10% of it).
 *
 *   npm run bench:formats [-- --size-mib 256 --rounds 3 --workers 2 --gzip-level 6]   (--workers: decodes in flight)
 * (gzip level 6 only to keep the build step short; inflate speed hardly depends on the level)
 */
import { createHash, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { promisify } from 'node:util';
import { constants as zlibConstants, gunzip, zstdCompressSync, zstdDecompressSync } from 'node:zlib';
import { decodeChunk } from '../src/format/codec.js';
import type { Chunk, Compression } from '../src/format/model.js';
import { openLayer } from '../src/format/open-layer.js';
import { buildLayerBuffer, type BuildOptions } from '../src/format/writer/index.js';
import { encodeHeader, padding, simpleFileHeader } from '../src/format/writer/tar-header.js';
import { BufferRangeReader } from '../src/util/range-reader.js';

const require = createRequire(import.meta.url);
const zstd = require('zstd-napi') as {
  compress(b: Uint8Array, params?: { compressionLevel?: number }): Buffer;
  decompress(b: Uint8Array): Buffer;
};
const gunzipAsync = promisify(gunzip);

interface Args {
  sizeMiB: number;
  rounds: number;
  workers: number;
  gzipLevel: number;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { sizeMiB: 256, rounds: 3, workers: 2, gzipLevel: 6 };
  for (let i = 0; i < argv.length; i++) {
    const v = Number(argv[i + 1]);
    switch (argv[i]) {
      case '--size-mib':
        args.sizeMiB = v;
        break;
      case '--rounds':
        args.rounds = v;
        break;
      case '--workers':
        args.workers = v;
        break;
      case '--gzip-level':
        args.gzipLevel = v;
        break;
      default:
        continue;
    }
    if (!Number.isFinite(v) || v <= 0) throw new Error(`bad value for ${argv[i]}`);
    i++;
  }
  return args;
}

/** Word soup: compresses about 3-4x, like text and code. */
function texty(n: number, seed: Buffer): Buffer {
  const words = [
    'import',
    'return',
    'self',
    'def',
    'lambda',
    'tensor',
    'weight',
    '\n',
    '    ',
    'x',
    '0',
    '=',
    '(',
    ')',
  ];
  const out = Buffer.alloc(n);
  let o = 0;
  for (let i = 0; o < n; i++) o += out.write(words[seed[i % seed.length]! % words.length]! + ' ', o);
  return out;
}

/** A tar of `total` bytes of payload: big random (model-like) and compressible files, many small ones. */
function syntheticTar(total: number): Buffer {
  const parts: Buffer[] = [];
  const seed = randomBytes(1 << 16);
  let payload = 0;
  let i = 0;
  const add = (name: string, data: Buffer): void => {
    const h = { ...simpleFileHeader(name, data.length), mode: 0o644, mtime: 1_700_000_000 };
    parts.push(encodeHeader(h), data, Buffer.alloc(padding(data.length)));
    payload += data.length;
  };
  while (payload < total) {
    const k = i++ % 10;
    if (k < 3) add(`models/shard-${i}.bin`, randomBytes(8 << 20));
    else if (k < 6) add(`src/big-${i}.txt`, texty(6 << 20, seed.subarray(i % 1000)));
    else for (let j = 0; j < 64; j++) add(`lib/pkg-${i}/mod-${j}.py`, texty(16 << 10, seed.subarray(j)));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

interface Job {
  span: Buffer;
  chunk: Chunk;
}

async function collectJobs(blob: Buffer): Promise<{ jobs: Job[]; bytes: number; compression: Compression }> {
  const reader = new BufferRangeReader(blob);
  const index = await openLayer(reader);
  const jobs: Job[] = [];
  let bytes = 0;
  for (const node of index.nodes) {
    if (!node || node.type !== 'reg') continue;
    for (const chunk of node.chunks) {
      const span = chunk.zeros ? Buffer.alloc(0) : blob.subarray(chunk.compressedOffset, chunk.compressedEnd);
      jobs.push({ span, chunk });
      bytes += chunk.size;
    }
  }
  return { jobs, bytes, compression: index.compression };
}

/** Run `fn` over all jobs with `concurrency` in flight; returns MB/s of uncompressed output. */
async function throughput(
  jobs: Job[],
  bytes: number,
  concurrency: number,
  fn: (j: Job) => Promise<void>,
): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < jobs.length) await fn(jobs[next++]!);
    }),
  );
  const s = (performance.now() - t0) / 1000;
  return bytes / 1e6 / s;
}

const sha256 = (b: Buffer): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

function check(j: Job, plain: Buffer): void {
  const data = plain.subarray(j.chunk.innerOffset, j.chunk.innerOffset + j.chunk.size);
  if (sha256(data) !== j.chunk.digest) throw new Error('baseline digest mismatch');
}

/**
 * zlib's built-in zstd vs zstd-napi on the same data, synchronous on the main thread, interleaved by
 * round: decompress + sha256 of every chunk span, and compress (level 3) of 1 MiB pieces of the tar.
 */
function compareZstdEngines(jobs: Job[], bytes: number, tar: Buffer, rounds: number): string[] {
  const decoders: Record<string, (b: Buffer) => Buffer> = {
    'zstd-napi': (b) => zstd.decompress(b),
    'zlib (node)': (b) => zstdDecompressSync(b),
  };
  const encoders: Record<string, (b: Buffer) => Buffer> = {
    'zstd-napi': (b) => zstd.compress(b, { compressionLevel: 3 }),
    'zlib (node)': (b) => zstdCompressSync(b, { params: { [zlibConstants.ZSTD_c_compressionLevel]: 3 } }),
  };
  const pieces: Buffer[] = [];
  for (let o = 0; o < Math.min(tar.length, 64 << 20); o += 1 << 20)
    pieces.push(tar.subarray(o, o + (1 << 20)));
  const pieceBytes = pieces.reduce((n, p) => n + p.length, 0);
  const dec: Record<string, number[]> = {};
  const enc: Record<string, number[]> = {};
  for (let round = 0; round < rounds; round++) {
    for (const [name, fn] of Object.entries(decoders)) {
      const t0 = performance.now();
      for (const j of jobs) if (j.span.length > 0) check(j, fn(j.span));
      (dec[name] ??= []).push(bytes / 1e6 / ((performance.now() - t0) / 1000));
    }
    for (const [name, fn] of Object.entries(encoders)) {
      const t0 = performance.now();
      for (const p of pieces) fn(p);
      (enc[name] ??= []).push(pieceBytes / 1e6 / ((performance.now() - t0) / 1000));
    }
  }
  const median = (a: number[]): number => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
  const rows: string[] = [];
  for (const [op, table] of [
    ['decompress+sha', dec],
    ['compress (l3)', enc],
  ] as const) {
    const ref = median(table['zstd-napi']!);
    for (const [name, v] of Object.entries(table)) {
      rows.push(
        `${name.padEnd(18)} ${op.padEnd(14)} ${fmt(median(v), 11)} ${fmt(Math.max(...v), 11)}   ${(median(v) / ref).toFixed(2).padStart(6)}x`,
      );
    }
  }
  return rows;
}

function fmt(n: number, width = 8): string {
  return n.toFixed(1).padStart(width);
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const total = args.sizeMiB << 20;
  console.log(
    `formats bench: ${args.sizeMiB} MiB synthetic layer, decodes in flight ${args.workers}, rounds ${args.rounds}`,
  );
  let t = performance.now();
  const tar = syntheticTar(total);
  console.log(
    `  input tar ${(tar.length / 1048576).toFixed(0)} MiB built in ${((performance.now() - t) / 1000).toFixed(1)} s`,
  );

  const rows: string[] = [];
  const engineRows: string[] = [];
  let pass = true;
  for (const format of ['estargz', 'zstd:chunked'] as const) {
    const opts: BuildOptions = { format, gzipLevel: args.gzipLevel };
    t = performance.now();
    const built = await buildLayerBuffer(tar, opts);
    const buildS = (performance.now() - t) / 1000;
    const { jobs, bytes, compression } = await collectJobs(built.blob);
    console.log(
      `  ${format}: blob ${(built.size / 1048576).toFixed(0)} MiB (${jobs.length} chunks) built in ${buildS.toFixed(1)} s` +
        ` (${(tar.length / 1e6 / buildS).toFixed(0)} MB/s)`,
    );
    const ours: number[] = [];
    const base: number[] = [];
    const workers = args.workers;
    for (let round = 0; round < args.rounds; round++) {
      // Interleave so background noise on a shared machine hits both sides alike.
      ours.push(
        await throughput(jobs, bytes, workers, async (j) => {
          await decodeChunk(compression, j.span, j.chunk);
        }),
      );
      base.push(
        compression === 'gzip'
          ? await throughput(jobs, bytes, workers, async (j) => check(j, await gunzipAsync(j.span)))
          : await throughput(jobs, bytes, 1, async (j) => check(j, zstd.decompress(j.span))),
      );
    }
    if (compression === 'zstd') engineRows.push(...compareZstdEngines(jobs, bytes, tar, args.rounds));
    const best = (a: number[]): number => Math.max(...a);
    const median = (a: number[]): number => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
    const ratio = median(ours) / median(base);
    const target = compression === 'gzip' ? ratio >= 0.85 : median(ours) >= 400;
    pass &&= target;
    rows.push(
      `${format.padEnd(13)} ${fmt(median(ours))} ${fmt(best(ours))} ${fmt(median(base))} ${fmt(best(base))} ${ratio
        .toFixed(2)
        .padStart(
          6,
        )}   ${compression === 'gzip' ? '>= 0.85x raw' : '>= 400 MB/s '}  ${target ? 'ok' : 'MISSED'}`,
    );
  }
  console.log('');
  console.log('format         decode+verify MB/s   baseline MB/s      ratio   target        result');
  console.log('               median     best     median     best   (median)');
  for (const r of rows) console.log(r);
  console.log('');
  console.log(
    'baseline: gzip = zlib.gunzip (libuv pool) + sha256 on the main thread, same concurrency;' +
      ' zstd = zstd-napi decompress + sha256, synchronous on the main thread.',
  );
  console.log('');
  console.log('zstd engine        op            median MB/s   best MB/s   vs zstd-napi (median)');
  for (const r of engineRows) console.log(r);
  if (!pass) process.exitCode = 1;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(2);
});
