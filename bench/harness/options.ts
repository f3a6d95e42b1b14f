import { resolve } from 'node:path';
import { Command, Option } from 'commander';
import { StoreError } from '../../src/util/errors.js';
import { parseNetwork, type NetworkProfile, type Shaper } from './networks.js';
import type { StoreFlavour } from '../lib/store-flags.js';
import { WORKLOAD_KINDS, WORKLOADS, type WorkloadKind, type WorkloadName } from './workloads.js';

/** Command-line options of the start-up benchmark (pure parsing; presets for --quick and full). */

export interface HarnessOptions {
  quick: boolean;
  images: WorkloadName[];
  scale: number;
  seed: number;
  iterations: number;
  networks: NetworkProfile[];
  shaper: Shaper;
  modes?: string;
  storeBin?: string;
  storeConfig?: string;
  storeLogLevel: string;
  baselineStore?: string;
  baselineStopSignal: NodeJS.Signals;
  baselineFlavour: StoreFlavour;
  baselineArgs: string[];
  baselineConfig?: string;
  workloads: WorkloadKind[];
  resolveProbe: boolean;
  /** Sample the store's smaps during each iteration and report its peak's composition. */
  rssParts: boolean;
  profile: string;
  workDir: string;
  out: string;
  suite: string;
  mirror?: string;
  buildOnly: boolean;
  /** Keep every iteration's store log and registry access records under <out>/logs. */
  keepLogs: boolean;
}

export const PRESETS = {
  full: {
    images: 'small,python,large',
    scale: 1,
    iterations: 5,
    networks: 'loopback,1gbit-10ms,100mbit-30ms',
  },
  quick: { images: 'small,large', scale: 0.1, iterations: 1, networks: 'loopback,100mbit-30ms' },
} as const;

export function buildCommand(): Command {
  return new Command('bench')
    .description(
      'Container start-up benchmark: full pull vs partial pull vs lazy pulling through an Additional Layer Store',
    )
    .option('--quick', `smoke preset: ${JSON.stringify(PRESETS.quick)}`, false)
    .option('--images <list>', `workloads (${WORKLOADS.join(',')})`)
    .option('--scale <x>', 'size factor of the large image payload (1 = ~1.4 GB of model files)')
    .option('--seed <n>', 'seed of the generated model payload', '42')
    .option('--iterations <n>', 'cold runs per mode, image and network')
    .option(
      '--networks <list>',
      'network profiles: loopback, 1gbit-10ms, 100mbit-30ms or <rate>(mbit|gbit)-<rtt>ms',
    )
    .addOption(
      new Option('--shaper <kind>', 'how shaped profiles are made')
        .choices(['proxy', 'htb'])
        .default('proxy'),
    )
    .option(
      '--modes <list>',
      'subset of modes (full-gzip, partial-zstd-chunked, lazy-estargz, lazy-esgz-opt, lazy-zstd-chunked, baseline-*)',
    )
    .option('--store-bin <cmd>', 'our store command (default: <repo>/bin/stargz-store, on the pinned Node)')
    .option('--store-config <file>', 'config.toml passed to both stores (default: an empty one)')
    .option('--store-log-level <level>', 'log level passed to the stores', 'info')
    .option(
      '--baseline-store <path>',
      'another store binary taking the same flags (e.g. the Go stargz-store)',
    )
    .addOption(
      new Option('--baseline-stop-signal <sig>', 'signal that makes the baseline store unmount (Go: SIGINT)')
        .choices(['SIGINT', 'SIGTERM'])
        .default('SIGINT'),
    )
    .addOption(
      new Option(
        '--baseline-flavour <kind>',
        'command line of the baseline: auto (probe its --help), go (--config --log-level --root: the Go stargz-store v0.12 has no --addr), ours (+ --addr)',
      )
        .choices(['auto', 'go', 'ours'])
        .default('auto'),
    )
    .option('--baseline-args <args>', 'extra arguments for the baseline store (space-separated)')
    .option('--baseline-config <file>', 'config.toml of the baseline store (default: --store-config)')
    .option(
      '--workload <list>',
      `what the first run does: ${WORKLOAD_KINDS.join(', ')} (model-load reads a whole model shard; large image only)`,
      'startup',
    )
    .option(
      '--resolve-probe',
      'before each lazy iteration, time `stat <mnt>/<ref>/<digest>/diff` per layer on a fresh store (same for every store; startup workload)',
      false,
    )
    .option(
      '--rss-parts',
      "report what the store's peak RSS is made of per iteration (samples /proc/<pid>/smaps every 100 ms: a little CPU taken from the timed run)",
      false,
    )
    .option(
      '--profile <source>',
      'access profile source for eStargz optimisation: store (a lazy run recorded by our store) | strace | file:<path>',
      'store',
    )
    .option('--work-dir <dir>', 'large data and caches (never the repo)', '/tmp/sgz-bench')
    .option('--out <dir>', 'where results.json, results.md and chart.svg go', 'bench/out')
    .option('--suite <name>', 'Debian suite for debootstrap', 'bookworm')
    .option('--mirror <url>', 'Debian mirror (default: from the apt sources)')
    .option('--build-only', 'build and push the images, then stop', false)
    .option(
      '--keep-logs',
      "keep every iteration's store log and registry access records in <out>/logs",
      false,
    )
    .allowExcessArguments(false);
}

function num(v: unknown, what: string, min: number): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < min)
    throw new StoreError('E_CONFIG', `--${what} must be a number >= ${min}`);
  return n;
}

export function parseOptions(argv: readonly string[], repoRoot?: string): HarnessOptions {
  const cmd = buildCommand().exitOverride();
  cmd.parse([...argv], { from: 'user' });
  const o = cmd.opts<Record<string, string | boolean | undefined>>();
  const preset = o.quick ? PRESETS.quick : PRESETS.full;
  const images = String(o.images ?? preset.images)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const i of images) {
    if (!WORKLOADS.includes(i as WorkloadName)) {
      throw new StoreError('E_CONFIG', `unknown image "${i}" (known: ${WORKLOADS.join(', ')})`);
    }
  }
  const networks = String(o.networks ?? preset.networks)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map(parseNetwork);
  const iterations = num(o.iterations ?? preset.iterations, 'iterations', 1);
  if (!Number.isInteger(iterations)) throw new StoreError('E_CONFIG', '--iterations must be an integer');
  const scale = num(o.scale ?? preset.scale, 'scale', 0.001);
  const workDir = resolve(String(o.workDir));
  if (repoRoot && (resolve(workDir) + '/').startsWith(resolve(repoRoot) + '/')) {
    // gigabytes of layers never go into the repository tree
    throw new StoreError(
      'E_CONFIG',
      `--work-dir ${workDir} is inside the repository; use /tmp/... or another disk`,
    );
  }
  const kinds = String(o.workload)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const k of kinds) {
    if (!WORKLOAD_KINDS.includes(k as WorkloadKind)) {
      throw new StoreError('E_CONFIG', `unknown workload "${k}" (known: ${WORKLOAD_KINDS.join(', ')})`);
    }
  }
  if (kinds.length === 0) throw new StoreError('E_CONFIG', '--workload must name at least one workload');
  if (kinds.includes('model-load') && !images.includes('large')) {
    throw new StoreError('E_CONFIG', '--workload model-load needs the large image (--images large)');
  }
  return {
    quick: Boolean(o.quick),
    images: images as WorkloadName[],
    scale,
    seed: num(o.seed, 'seed', 0),
    iterations,
    networks,
    shaper: o.shaper as Shaper,
    ...(o.modes ? { modes: String(o.modes) } : {}),
    ...(o.storeBin ? { storeBin: String(o.storeBin) } : {}),
    ...(o.storeConfig ? { storeConfig: String(o.storeConfig) } : {}),
    storeLogLevel: String(o.storeLogLevel),
    ...(o.baselineStore ? { baselineStore: String(o.baselineStore) } : {}),
    baselineStopSignal: o.baselineStopSignal as NodeJS.Signals,
    baselineFlavour: o.baselineFlavour as StoreFlavour,
    baselineArgs: String(o.baselineArgs ?? '')
      .split(/\s+/)
      .filter(Boolean),
    ...(o.baselineConfig ? { baselineConfig: String(o.baselineConfig) } : {}),
    workloads: kinds as WorkloadKind[],
    resolveProbe: Boolean(o.resolveProbe),
    rssParts: Boolean(o.rssParts),
    profile: String(o.profile),
    workDir,
    out: resolve(String(o.out)),
    suite: String(o.suite),
    ...(o.mirror ? { mirror: String(o.mirror) } : {}),
    buildOnly: Boolean(o.buildOnly),
    keepLogs: Boolean(o.keepLogs),
  };
}
