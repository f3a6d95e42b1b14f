/**
 * Cold and warm sequential read of one file of a lazily served layer, through the store's mount,
 * outside Podman: where a cold read's CPU goes, per thread group, in ~10 s a run. Stores are run
 * in turn (ours, then the baseline, then ours ...), each run on a fresh --root, against the
 * registry data a harness run left in --work-dir (`npm run bench -- --images large --build-only`).
 *
 *   npm run build && node dist/bench/mount-read.js [--tag estargz] [--runs 3]
 *     [--file models/llm/model-00001-of-00003.safetensors] [--work-dir /tmp/sgzb]
 *     [--store-config F] [--store CMD] [--baseline-store CMD] [--baseline-flavour go|ours|auto]
 *
 * Per run: cold and warm MB/s (`cat` in a child process: the store's own loop serves the mount),
 * the store's peak RSS (and what it was made of: bench/lib/rss-parts.ts), and CPU milliseconds during the cold read of the store's main thread, its
 * V8 helper threads (garbage collection, compilation), its libuv pool (inflate, file I/O), the
 * registry, and the machine as a whole. Medians at the end. Not a test: it prints figures.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBenchRegistry } from './lib/registry-server.js';
import { startStore } from './lib/store-process.js';
import { formatParts, sampleRssParts, type RssParts } from './lib/rss-parts.js';
import { resolveLaunchFlags, type StoreFlavour } from './lib/store-flags.js';
import { percentile } from './lib/stats.js';

const REPO = resolve(fileURLToPath(import.meta.url), '../../..');
const MiB = 1024 * 1024;

interface Options {
  tag: string;
  runs: number;
  file: string;
  workDir: string;
  storeConfig?: string;
  /** Our store's command (default: bin/stargz-store); another build for an A/B. */
  store: string[];
  baseline?: string;
  baselineFlavour: StoreFlavour;
}

function parseArgs(argv: string[]): Options {
  const lab = join(REPO, '..', 'shared', 'lab', 'go-baseline', 'config.toml');
  const o: Options = {
    tag: 'estargz',
    runs: 3,
    file: 'models/llm/model-00001-of-00003.safetensors',
    workDir: '/tmp/sgzb',
    store: [join(REPO, 'bin', 'stargz-store')],
    baselineFlavour: 'auto',
    ...(existsSync(lab) ? { storeConfig: lab } : {}),
  };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1] ?? '';
    switch (argv[i]) {
      case '--tag':
        o.tag = v;
        break;
      case '--runs':
        o.runs = Math.max(1, Number(v) || 1);
        break;
      case '--file':
        o.file = v;
        break;
      case '--work-dir':
        o.workDir = v;
        break;
      case '--store-config':
        o.storeConfig = v;
        break;
      case '--store':
        o.store = v.split(/\s+/).filter(Boolean);
        break;
      case '--baseline-store':
        o.baseline = v;
        break;
      case '--baseline-flavour':
        o.baselineFlavour = v as StoreFlavour;
        break;
      default:
        throw new Error(
          `mount-read: unknown option ${argv[i]} (see the comment at the top of bench/mount-read.ts)`,
        );
    }
    i++;
  }
  return o;
}

/** CPU ticks of every thread of `pid`, by thread name, and of the machine. */
async function threadTicks(pids: readonly number[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const pid of pids) {
    let tids: string[] = [];
    try {
      tids = await readdir(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const tid of tids) {
      try {
        const s = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        const name = s.slice(s.indexOf('(') + 1, s.lastIndexOf(')'));
        const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
        const key = `${pid}:${name}`;
        out.set(key, (out.get(key) ?? 0) + Number(f[11]) + Number(f[12]));
      } catch {
        // the thread ended
      }
    }
  }
  const cpu = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  out.set('machine:busy', cpu.reduce((a, b) => a + b, 0) - cpu[3]! - cpu[4]!);
  return out;
}

/** Thread names grouped the way the report reads them. */
function group(name: string, storePid: number, registryPid: number): string {
  const [pid, thread] = [Number(name.slice(0, name.indexOf(':'))), name.slice(name.indexOf(':') + 1)];
  if (name === 'machine:busy') return 'machine';
  if (pid === registryPid) return 'registry';
  if (pid !== storePid) return 'other';
  if (thread === 'V8Worker') return 'v8-helpers';
  if (thread === 'libuv-worker') return 'libuv-pool';
  return thread === 'node' || thread === 'MainThread' || thread === 'stargz-store' ? 'main' : 'store-other';
}

function catFile(path: string): Promise<number> {
  return new Promise((done, fail) => {
    const t0 = performance.now();
    const c = spawn('cat', [path], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    c.stderr.on('data', (b: Buffer) => (err += b.toString()));
    c.once('error', fail);
    c.once('exit', (code) =>
      code === 0 ? done(performance.now() - t0) : fail(new Error(`cat ${path} failed: ${err.trim()}`)),
    );
  });
}

interface RunResult {
  store: string;
  coldMBs: number;
  warmMBs: number;
  peakRssMB: number;
  /** What the resident memory was made of at its largest sampled total. */
  peakParts?: RssParts | undefined;
  cpuMs: Record<string, number>;
}

async function oneRun(
  label: string,
  command: string[],
  flavour: StoreFlavour,
  o: Options,
  registryHost: string,
  registryPid: number,
  digest: string,
): Promise<RunResult> {
  const dir = await mkdtemp(join(tmpdir(), 'mount-read-'));
  const flags = await resolveLaunchFlags(command, flavour);
  const store = await startStore({
    command,
    flags,
    root: join(dir, 'root'),
    mountpoint: join(dir, 'mnt'),
    addr: join(dir, 'store.sock'),
    logLevel: 'warn',
    logFile: join(dir, 'store.log'),
    stopSignal: 'SIGINT',
    ...(o.storeConfig !== undefined ? { config: o.storeConfig } : {}),
  });
  const parts = sampleRssParts(store.pid);
  try {
    const ref = `${registryHost}/bench/large:${o.tag}`;
    const file = join(dir, 'mnt', Buffer.from(ref).toString('base64'), digest, 'diff', o.file);
    const size = (await stat(file)).size;
    const before = await threadTicks([store.pid, registryPid]);
    const coldMs = await catFile(file);
    const after = await threadTicks([store.pid, registryPid]);
    const warmMs = await catFile(file);
    const peak = (await store.sample())?.peakRssKiB ?? 0;
    await parts.stop();
    const cpuMs: Record<string, number> = {};
    for (const [k, v] of after) {
      const g = group(k, store.pid, registryPid);
      cpuMs[g] = (cpuMs[g] ?? 0) + (v - (before.get(k) ?? 0)) * 10;
    }
    return {
      store: label,
      coldMBs: size / MiB / (coldMs / 1000),
      warmMBs: size / MiB / (warmMs / 1000),
      peakRssMB: peak / 1024,
      peakParts: parts.peak(),
      cpuMs,
    };
  } finally {
    await parts.stop();
    await store.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

const GROUPS = ['main', 'v8-helpers', 'libuv-pool', 'store-other', 'registry', 'machine'];

function line(r: RunResult): string {
  const cpu = GROUPS.map((g) => `${g} ${Math.round(r.cpuMs[g] ?? 0)}`).join(', ');
  const parts = r.peakParts !== undefined ? ` (at its peak, MB: ${formatParts(r.peakParts)})` : '';
  return `${r.store.padEnd(8)} cold ${r.coldMBs.toFixed(1)} MB/s, warm ${r.warmMBs.toFixed(0)} MB/s, peak RSS ${r.peakRssMB.toFixed(0)} MB${parts}; CPU ms during the cold read: ${cpu}`;
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const data = join(o.workDir, 'registry', 'data');
  if (!existsSync(data)) {
    throw new Error(
      `mount-read: no registry data under ${data}: run the harness with --images large --build-only first`,
    );
  }
  const confDir = await mkdtemp(join(tmpdir(), 'mount-read-registry-'));
  const registry = await startBenchRegistry({ dataDir: data, confDir });
  try {
    const res = await fetch(`http://${registry.host}/v2/bench/large/manifests/${o.tag}`, {
      headers: {
        accept:
          'application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.v2+json',
      },
    });
    if (!res.ok) throw new Error(`mount-read: bench/large:${o.tag} not in the registry (${res.status})`);
    const manifest = (await res.json()) as { layers: Array<{ digest: string; size: number }> };
    const largest = manifest.layers.reduce((a, b) => (b.size > a.size ? b : a));
    const stores: Array<[string, string[], StoreFlavour]> = [['ours', o.store, 'ours']];
    if (o.baseline !== undefined) stores.push(['baseline', o.baseline.split(/\s+/), o.baselineFlavour]);
    const results: RunResult[] = [];
    for (let i = 0; i < o.runs; i++) {
      for (const [label, command, flavour] of stores) {
        const r = await oneRun(label, command, flavour, o, registry.host, registry.pid, largest.digest);
        console.log(line(r));
        results.push(r);
      }
    }
    console.log(`# medians of ${o.runs} runs, ${o.tag}, ${o.file}`);
    for (const [label] of stores) {
      const mine = results.filter((r) => r.store === label);
      const med = (f: (r: RunResult) => number): number => percentile(mine.map(f), 50);
      const cpuMs: Record<string, number> = {};
      for (const g of GROUPS) cpuMs[g] = med((r) => r.cpuMs[g] ?? 0);
      console.log(
        line({
          store: label,
          coldMBs: med((r) => r.coldMBs),
          warmMBs: med((r) => r.warmMBs),
          peakRssMB: med((r) => r.peakRssMB),
          cpuMs,
        }),
      );
    }
  } finally {
    await registry.stop();
    await rm(confDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
});
