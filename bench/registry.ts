/**
 * Registry client benchmark: a 1 GiB random blob in a real docker-registry on loopback, read with
 * RegistryBlobReader as (a) random 4 KiB reads and (b) sequential 1 MiB reads, beside `curl`
 * fetching the very same ranges in the same run (one curl process, keep-alive, `-r` per range).
 * Prints requests, bytes transferred, time and throughput, and our/curl ratios.
 * Target: sequential >= 0.8x curl.
 *
 *   npm run build && node dist/bench/registry.js [--size-mib 1024 --random 1000 --seq-mib 1]
 */
import { spawn } from 'node:child_process';
import { createHash, randomFillSync } from 'node:crypto';
import { open, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RegistryClient, parseReference, type BlobReader } from '../src/registry/index.js';
import { pushBlobFile } from '../test/helpers/push.js';
import { startRegistry } from '../test/helpers/registry.js';
import { parseDigest } from '../src/util/digest.js';

interface Args {
  sizeMiB: number;
  random: number;
  seqMiB: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { sizeMiB: 1024, random: 1000, seqMiB: 1 };
  for (let i = 0; i < argv.length; i += 2) {
    const v = Number(argv[i + 1]);
    if (argv[i] === '--size-mib') a.sizeMiB = v;
    else if (argv[i] === '--random') a.random = v;
    else if (argv[i] === '--seq-mib') a.seqMiB = v;
  }
  return a;
}

/** Deterministic offsets (xorshift) so every run reads the same places. */
function offsets(n: number, size: number, len: number): number[] {
  let x = 0x9e3779b9;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out.push(Math.floor(((x >>> 0) / 2 ** 32) * (size - len)));
  }
  return out;
}

async function makeBlob(path: string, size: number): Promise<string> {
  const fh = await open(path, 'w');
  const hash = createHash('sha256');
  const buf = Buffer.allocUnsafe(4 << 20);
  try {
    for (let done = 0; done < size;) {
      const n = Math.min(buf.length, size - done);
      randomFillSync(buf, 0, n);
      hash.update(buf.subarray(0, n));
      await fh.write(buf, 0, n);
      done += n;
    }
  } finally {
    await fh.close();
  }
  return `sha256:${hash.digest('hex')}`;
}

interface Result {
  requests: number;
  bytes: number;
  seconds: number;
  wanted: number;
}

async function runOurs(
  reader: BlobReader,
  ranges: Array<[number, number]>,
  check?: (off: number, b: Buffer) => void,
): Promise<Result> {
  const s0 = reader.stats();
  const t0 = performance.now();
  let wanted = 0;
  for (const [off, len] of ranges) {
    const b = await reader.read(off, len);
    wanted += b.length;
    check?.(off, b);
  }
  const seconds = (performance.now() - t0) / 1000;
  const s1 = reader.stats();
  return { requests: s1.requests - s0.requests, bytes: s1.bytes - s0.bytes, seconds, wanted };
}

/** One curl process, keep-alive, one `-r` per range (config file with `next` between URLs). */
async function runCurl(dir: string, url: string, ranges: Array<[number, number]>): Promise<Result> {
  const cfg = join(dir, 'curl.cfg');
  const lines: string[] = [];
  ranges.forEach(([off, len], i) => {
    if (i) lines.push('next');
    lines.push(
      `url = "${url}"`,
      `range = "${off}-${off + len - 1}"`,
      'output = "/dev/null"',
      'write-out = "%{size_download}\\n"',
      'silent',
      'fail',
    );
  });
  await writeFile(cfg, lines.join('\n') + '\n');
  const t0 = performance.now();
  const out = await new Promise<string>((resolve, reject) => {
    const p = spawn('curl', ['-K', cfg], { stdio: ['ignore', 'pipe', 'inherit'] });
    const chunks: Buffer[] = [];
    p.stdout.on('data', (c: Buffer) => chunks.push(c));
    p.once('error', reject);
    p.once('close', (code) =>
      code === 0 ? resolve(Buffer.concat(chunks).toString()) : reject(new Error(`curl exited ${code}`)),
    );
  });
  const seconds = (performance.now() - t0) / 1000;
  const sizes = out.trim().split('\n').map(Number);
  if (sizes.length !== ranges.length)
    throw new Error(`curl fetched ${sizes.length} of ${ranges.length} ranges`);
  const bytes = sizes.reduce((s, n) => s + n, 0);
  return { requests: ranges.length, bytes, seconds, wanted: ranges.reduce((s, r) => s + r[1], 0) };
}

function fmt(n: number, d = 1): string {
  return n.toFixed(d).padStart(9);
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const size = args.sizeMiB * 1024 * 1024;
  const dir = await mkdtemp(join(tmpdir(), 'sgz-bench-registry-'));
  const reg = await startRegistry();
  const client = new RegistryClient();
  try {
    const t0 = performance.now();
    const file = join(dir, 'blob');
    const digest = await makeBlob(file, size);
    await pushBlobFile({ url: reg.url }, 'bench/blob', file, digest);
    const setup = (performance.now() - t0) / 1000;
    const ref = parseReference(`${reg.host}/bench/blob:x`);
    const reader = await client.openBlob(ref, parseDigest(digest), { size });
    const url = `${reg.url}/v2/bench/blob/blobs/${digest}`;

    // spot-check correctness against the file before timing anything
    const fh = await open(file, 'r');
    const check = async (off: number, len: number) => {
      const want = Buffer.alloc(len);
      await fh.read(want, 0, len, off);
      const got = await reader.read(off, len);
      if (!got.equals(want)) throw new Error(`wrong bytes at ${off}+${len}`);
    };
    for (const off of offsets(20, size, 300_000)) await check(off, 1 + (off % 300_000));
    await fh.close();

    const rnd: Array<[number, number]> = offsets(args.random, size, 4096).map((o) => [o, 4096]);
    const seqLen = args.seqMiB * 1024 * 1024;
    const seq: Array<[number, number]> = [];
    for (let off = 0; off < size; off += seqLen) seq.push([off, Math.min(seqLen, size - off)]);

    // interleave the runs so page cache and CPU contention hit both sides alike
    const fresh = async () => client.openBlob(ref, parseDigest(digest), { size });
    const oursRnd = await runOurs(await fresh(), rnd);
    const curlRnd = await runCurl(dir, url, rnd);
    const curlSeq = await runCurl(dir, url, seq);
    const oursSeq = await runOurs(await fresh(), seq);

    const MB = 1e6;
    const rows: Array<[string, string, Result, number]> = [
      [`random 4KiB x${rnd.length}`, 'ours', oursRnd, rnd.length],
      ['', 'curl', curlRnd, rnd.length],
      [`sequential ${args.seqMiB}MiB x${seq.length}`, 'ours', oursSeq, seq.length],
      ['', 'curl', curlSeq, seq.length],
    ];
    process.stdout.write(
      `registry bench: ${args.sizeMiB} MiB blob on loopback docker-registry (exact ranges), setup ${setup.toFixed(1)} s\n\n` +
        `${'scenario'.padEnd(24)}${'client'.padEnd(7)}${'requests'.padStart(9)}${'MB recv'.padStart(9)}${'seconds'.padStart(9)}${'reads/s'.padStart(9)}${'MB/s'.padStart(9)}\n`,
    );
    for (const [name, who, r, n] of rows) {
      process.stdout.write(
        `${name.padEnd(24)}${who.padEnd(7)}${String(r.requests).padStart(9)}${fmt(r.bytes / MB)}${fmt(r.seconds, 2)}${fmt(n / r.seconds, 0)}${fmt(r.wanted / MB / r.seconds)}\n`,
      );
    }
    const ratioRnd = curlRnd.seconds / oursRnd.seconds;
    const ratioSeq = curlSeq.seconds / oursSeq.seconds;
    process.stdout.write(
      `\nours/curl throughput (same ranges, same run): random 4KiB ${ratioRnd.toFixed(2)}x, ` +
        `sequential ${ratioSeq.toFixed(2)}x (target >= 0.80x: ${ratioSeq >= 0.8 ? 'MET' : 'NOT MET'})\n`,
    );
  } finally {
    await client.close();
    await reg.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
