/**
 * Cost of Prometheus metrics on the FUSE read path, metrics on vs off in the same run.
 *
 * A FUSE mount (the store's own adapter) serves an in-memory tree of files whose reads cost nothing
 * but the copy, so the measured difference is the adapter's recording (timeFuseOp) relative to the
 * cheapest possible read: the worst case for the relative overhead (a real read adds cache lookups,
 * verification and often the network). Another process (`cat`) reads distinct files each round
 * (the mount uses kernel_cache, so a file is never read twice), rounds alternate off/on in ABBA
 * order to cancel drift. An "on" round is followed by one /metrics scrape, whose CPU time is
 * reported on its own (Prometheus scrapes every 15 s or so, not every 30 ms).
 *
 *   npm run build && node dist/bench/metrics.js [--rounds 12] [--files 16] [--file-mib 4] [--scrape 0|1]
 *
 * Target: the median "on" round is at most 2 % slower than the median "off" round. The serving
 * process's CPU time per round is reported too: on a shared machine it is the steadier figure.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mountVirtualFs } from '../src/fs/fuse-adapter.js';
import { FsError } from '../src/fs/errno.js';
import { ROOT_DIR_ATTR, S_IFDIR, S_IFREG, type Attr, type VirtualFs } from '../src/fs/vfs.js';
import { startMetricsServer } from '../src/store/metrics-server.js';
import { disableMetrics, enableMetrics, timeFuseOp } from '../src/util/metrics.js';
import { emptyStatfs } from '../src/fs/vfs.js';

interface Args {
  /** Scrape /metrics after each "on" round (default 1; 0 = never). */
  scrape: number;
  rounds: number;
  files: number;
  fileMiB: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { scrape: 1, rounds: 12, files: 16, fileMiB: 4 };
  for (let i = 0; i < argv.length; i += 2) {
    const v = Number(argv[i + 1]);
    if (!Number.isInteger(v) || v < 0 || (v === 0 && argv[i] !== '--scrape'))
      throw new Error(`bad value for ${argv[i]}`);
    if (argv[i] === '--scrape') a.scrape = v;
    else if (argv[i] === '--rounds') a.rounds = v;
    else if (argv[i] === '--files') a.files = v;
    else if (argv[i] === '--file-mib') a.fileMiB = v;
    else throw new Error(`unknown flag ${argv[i]}`);
  }
  return a;
}

/** `/r<round>/f<i>`: every file `size` bytes of one shared buffer. */
function memoryFs(rounds: number, files: number, size: number): VirtualFs {
  const data = Buffer.alloc(size, 0x5a);
  const dir = (ino: number): Attr => ({ ...ROOT_DIR_ATTR, mode: S_IFDIR | 0o755, ino });
  const file = (ino: number): Attr => ({ ...ROOT_DIR_ATTR, mode: S_IFREG | 0o444, ino, size, nlink: 1 });
  const parse = (path: string): { r?: number; f?: number } | undefined => {
    const m = /^\/(?:r(\d+)(?:\/f(\d+))?)?$/.exec(path);
    if (m === null) return undefined;
    const r = m[1] === undefined ? undefined : Number(m[1]);
    const f = m[2] === undefined ? undefined : Number(m[2]);
    if ((r !== undefined && r >= rounds) || (f !== undefined && f >= files)) return undefined;
    return { ...(r !== undefined ? { r } : {}), ...(f !== undefined ? { f } : {}) };
  };
  const enoent = (): never => {
    throw new FsError('ENOENT', 'no such file');
  };
  const attrOf = (path: string): Attr => {
    const p = parse(path) ?? enoent();
    if (p.r === undefined) return ROOT_DIR_ATTR;
    if (p.f === undefined) return dir(2 + p.r);
    return file(1000 + p.r * files + p.f);
  };
  return {
    getattr: (path) => Promise.resolve(attrOf(path)),
    readdir: (path) => {
      const p = parse(path) ?? enoent();
      if (p.r === undefined)
        return Promise.resolve(
          Array.from({ length: rounds }, (_, r) => ({ name: `r${r}`, attr: dir(2 + r) })),
        );
      return Promise.resolve(
        Array.from({ length: files }, (_, f) => ({ name: `f${f}`, attr: file(1000 + p.r! * files + f) })),
      );
    },
    readlink: () => Promise.reject(new FsError('EINVAL', 'not a link')),
    open: (path) => {
      attrOf(path);
      return Promise.resolve({
        read: (offset: number, length: number) =>
          Promise.resolve(data.subarray(Math.min(offset, size), Math.min(offset + length, size))),
      });
    },
    getxattr: () => Promise.resolve(undefined),
    listxattr: () => Promise.resolve([]),
    create: () => Promise.reject(new FsError('EROFS', 'read-only')),
    rmdir: () => Promise.reject(new FsError('EROFS', 'read-only')),
    statfs: () => Promise.resolve(emptyStatfs()),
    deadlineMs: () => 30_000,
  };
}

function catFiles(paths: string[]): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    spawn('cat', paths, { stdio: ['ignore', 'ignore', 'inherit'] })
      .on('error', reject)
      .on('exit', (code) =>
        code === 0 ? resolve(performance.now() - t0) : reject(new Error(`cat exited ${code}`)),
      );
  });
}

function scrape(address: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(`http://${address}/metrics`, (res) => {
      let n = 0;
      res.on('data', (c: Buffer) => (n += c.length));
      res.on('end', () => resolve(n));
    })
      .on('error', reject)
      .end();
  });
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/**
 * In-process cost of the recording itself: ns per timeFuseOp call, on minus off (alternating blocks).
 * Divided by the CPU time one 128 KiB FUSE read costs, this is the overhead load cannot blur.
 */
async function recordingCostNs(calls = 200_000, blocks = 10): Promise<number> {
  const one = Promise.resolve(0);
  const block = async (on: boolean): Promise<number> => {
    if (on) enableMetrics();
    else disableMetrics();
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) await timeFuseOp('read', one);
    return performance.now() - t0;
  };
  const off: number[] = [];
  const on: number[] = [];
  for (let b = 0; b < blocks; b++) {
    off.push(await block(false));
    on.push(await block(true));
  }
  disableMetrics();
  return ((median(on) - median(off)) * 1e6) / calls;
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const size = a.fileMiB << 20;
  const total = a.rounds * 2;
  const dir = await mkdtemp(join(tmpdir(), 'sgz-bench-metrics-'));
  const mnt = join(dir, 'mnt');
  await mkdir(mnt);
  const mount = await mountVirtualFs(mnt, memoryFs(total, a.files, size), { allowOther: false });
  const server = await startMetricsServer('127.0.0.1:0');
  const times = { off: [] as number[], on: [] as number[] };
  /** CPU time (all threads of this, the serving, process) per round: less sensitive to other load. */
  const cpu = { off: [] as number[], on: [] as number[] };
  const scrapeCpu: number[] = [];
  try {
    // warm-up round (not measured): page tables, JIT, the fuse thread
    disableMetrics();
    for (let round = 0; round < total; round++) {
      // ABBA: off on on off off on on off ...
      const on = (round + 1) % 4 >= 2;
      if (on) enableMetrics();
      else disableMetrics();
      const paths = Array.from({ length: a.files }, (_, f) => join(mnt, `r${round}`, `f${f}`));
      const c0 = process.cpuUsage();
      const ms = await catFiles(paths);
      const c = process.cpuUsage(c0);
      (on ? times.on : times.off).push(ms);
      (on ? cpu.on : cpu.off).push((c.user + c.system) / 1000);
      // a scrape, measured on its own: Prometheus scrapes every 15 s or so, not once per round
      if (on && a.scrape > 0) {
        const s0 = process.cpuUsage();
        await scrape(server.address);
        const sc = process.cpuUsage(s0);
        scrapeCpu.push((sc.user + sc.system) / 1000);
      }
    }
  } finally {
    disableMetrics();
    await server.close();
    await mount.unmount();
    await rm(dir, { recursive: true, force: true });
  }
  const mib = (a.files * size) / (1 << 20);
  const costNs = await recordingCostNs();
  // reads of 128 KiB (the kernel's FUSE max_read) per round, CPU per read with metrics off
  const readsPerRound = (a.files * size) / (128 * 1024);
  const cpuPerReadUs = (median(cpu.off) * 1000) / readsPerRound;
  const off = median(times.off);
  const on = median(times.on);
  const overhead = ((on - off) / off) * 100;
  const result = {
    roundMiB: mib,
    rounds: a.rounds,
    offMs: times.off.map((x) => Math.round(x)),
    onMs: times.on.map((x) => Math.round(x)),
    medianOffMiBps: Math.round(mib / (off / 1000)),
    medianOnMiBps: Math.round(mib / (on / 1000)),
    overheadPercent: Math.round(overhead * 100) / 100,
    cpuOffMs: cpu.off.map((x) => Math.round(x)),
    cpuOnMs: cpu.on.map((x) => Math.round(x)),
    medianCpuOffMs: Math.round(median(cpu.off)),
    medianCpuOnMs: Math.round(median(cpu.on)),
    cpuOverheadPercent: Math.round(((median(cpu.on) - median(cpu.off)) / median(cpu.off)) * 10000) / 100,
    medianScrapeCpuMs: scrapeCpu.length > 0 ? Math.round(median(scrapeCpu) * 100) / 100 : null,
    recordingCostNsPerOp: Math.round(costNs),
    cpuPerReadUs: Math.round(cpuPerReadUs * 10) / 10,
    recordingOverheadPercent: Math.round((costNs / 1000 / cpuPerReadUs) * 10000) / 100,
    target: 'overhead <= 2 %',
  };
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
}

await main();
