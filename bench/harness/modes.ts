import { copyFile, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { onCleanup } from '../lib/cleanup.js';
import { unmountUnder } from '../lib/mounts.js';
import { PodmanEnv, type StorageMode } from '../lib/podman.js';
import { run, say, sleep, tail } from '../lib/proc.js';
import { blobUsage, summarizeAccess, type Usage } from '../lib/registry-server.js';
import { sampleRssParts, type RssParts, type RssPartsSampler } from '../lib/rss-parts.js';
import type { LaunchFlag } from '../lib/store-flags.js';
import { parseResolutions } from '../lib/store-log.js';
import { startStore, type RunningStore } from '../lib/store-process.js';
import type { FormatId } from './formats.js';
import type { NetworkPath } from './networks.js';
import { parseModelLoadOutput, type Workload } from './workloads.js';

/**
 * Modes = how an image gets from the registry into a running container:
 *   full-gzip             plain `podman pull` of the gzip image (the baseline everything is compared to)
 *   partial-zstd-chunked  Podman partial pull (enable_partial_images) of the zstd:chunked image
 *   lazy-<format>         through our store as an Additional Layer Store, per lazy format
 *   baseline-<format>     the same through another store binary (--baseline-store)
 */

export type StoreKind = 'ours' | 'baseline';

export interface ModeDef {
  id: string;
  format: FormatId;
  storage: 'plain' | 'partial' | 'als';
  store?: StoreKind;
  label: string;
}

export const LAZY_FORMATS: readonly FormatId[] = ['estargz', 'esgz-opt', 'zstd-chunked'];

/** Every mode the run can do, given whether a baseline store was supplied. Pure. */
export function allModes(withBaseline: boolean): ModeDef[] {
  const modes: ModeDef[] = [
    { id: 'full-gzip', format: 'gzip', storage: 'plain', label: 'full pull (gzip)' },
    {
      id: 'partial-zstd-chunked',
      format: 'zstd-chunked',
      storage: 'partial',
      label: 'Podman partial pull (zstd:chunked)',
    },
  ];
  for (const f of LAZY_FORMATS)
    modes.push({
      id: `lazy-${f}`,
      format: f,
      storage: 'als',
      store: 'ours',
      label: `lazy, our store (${f})`,
    });
  if (withBaseline) {
    for (const f of LAZY_FORMATS) {
      modes.push({
        id: `baseline-${f}`,
        format: f,
        storage: 'als',
        store: 'baseline',
        label: `lazy, baseline store (${f})`,
      });
    }
  }
  return modes;
}

/** Select modes by id list (or all); unknown ids are an error. Pure. */
export function selectModes(spec: string | undefined, withBaseline: boolean): ModeDef[] {
  const all = allModes(withBaseline);
  if (!spec || spec === 'all') return all;
  const ids = spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const out: ModeDef[] = [];
  for (const id of ids) {
    const m = all.find((x) => x.id === id);
    if (!m) {
      throw new StoreError('E_CONFIG', `unknown mode "${id}" (known: ${all.map((x) => x.id).join(', ')})`);
    }
    out.push(m);
  }
  return out;
}

/** Scratch dir of one iteration: `<work>/r/<seq>` (see runIteration for why it is short). */
export function runDir(workDir: string, seq: number): string {
  return join(workDir, 'r', String(seq));
}

/** Longest Podman dir (<run dir>/p) with which `podman run` does not stall on this Podman. */
export const MAX_PODMAN_DIR = 40;

export interface StoreCommand {
  argv: string[];
  stopSignal: NodeJS.Signals;
  config?: string;
  logLevel: string;
  /** Launch flags the binary accepts (probed or named; see store-flags.ts). */
  flags?: readonly LaunchFlag[];
  extraArgs?: readonly string[];
}

/** One layer of the image as one iteration saw it. */
export interface LayerStat {
  digest: string;
  /** Compressed size of the blob. */
  blobBytes: number;
  /** Registry bytes and blob GETs of this blob from the start of the pull to the end of the window. */
  startBytes: number;
  startRequests: number;
  /**
   * Our store's `layer resolved` ms: first lookup to answer (0 for a layer resolved ahead of the
   * client's lookup); absent when the store does not log it.
   */
  resolveMs?: number;
  /**
   * --resolve-probe: ms of `stat <mnt>/<base64 ref>/<digest>/diff` from the harness on a fresh
   * instance of the same store, layers in image order (the first one includes the manifest fetch);
   * measured the same way for every store.
   */
  lookupMs?: number;
}

/**
 * Time the ALS lookup of each layer (what c/storage does first) on a fresh store instance, outside
 * the measured window: start, `stat` the layers' `diff` in image order, stop. The stat runs in the
 * harness process, never in the store serving the mount.
 */
async function probeLookups(
  dir: string,
  cmd: StoreCommand,
  config: string,
  ref: string,
  layers: ReadonlyArray<{ digest: string }>,
  prefix: string[],
): Promise<number[]> {
  const q = join(dir, 'q');
  const mnt = join(q, 'm');
  const st = await startStore({
    command: cmd.argv,
    root: join(q, 'root'),
    mountpoint: mnt,
    addr: join(q, 's.sock'),
    config,
    logLevel: cmd.logLevel,
    ...(cmd.flags ? { flags: cmd.flags } : {}),
    ...(cmd.extraArgs ? { extraArgs: cmd.extraArgs } : {}),
    prefix,
    stopSignal: cmd.stopSignal,
    logFile: join(q, 'store.log'),
  });
  const out: number[] = [];
  try {
    const refDir = join(mnt, Buffer.from(ref).toString('base64'));
    for (const l of layers) {
      const t0 = performance.now();
      await stat(join(refDir, l.digest, 'diff'));
      out.push(performance.now() - t0);
    }
  } finally {
    await st.stop();
    await unmountUnder(q);
  }
  return out;
}

export interface IterationResult {
  iteration: number;
  ok: boolean;
  error?: string;
  pullMs?: number;
  runMs?: number;
  totalMs?: number;
  registry?: Usage;
  /** Registry traffic of the pull phase, and of the run phase (after the pull: start-up reads and
   *  whatever the store fetches in the background while the container starts and runs). */
  pullRegistry?: Usage;
  runRegistry?: Usage;
  /** Compressed bytes of the image's layers (for registry bytes / blob bytes). */
  imageBlobBytes?: number;
  layers?: LayerStat[];
  /** model-load: time to read the whole shard cold (sha256sum) and again warm (cat), in the container. */
  coldReadMs?: number;
  warmReadMs?: number;
  readBytes?: number;
  /** Layers served by the store vs all layers (als modes). */
  lazyLayers?: number;
  totalLayers?: number;
  storePeakRssKiB?: number;
  /** With --rss-parts: what the store's resident memory was made of at its largest sample. */
  storePeakParts?: RssParts;
  storeCpuMs?: number;
  storeForcedUnmount?: boolean;
  /** The store did not start (the harness then skips that store's remaining modes). */
  storeStartFailed?: boolean;
  output?: string;
}

export interface IterationContext {
  workDir: string;
  path: NetworkPath;
  workload: Workload;
  mode: ModeDef;
  iteration: number;
  stores: Partial<Record<StoreKind, StoreCommand>>;
  /** Sequence number of this iteration in the run (names its scratch dir). */
  seq: number;
  /** Store logs of failed iterations are kept here. */
  failedLogDir?: string;
  /** Keep the store log and the window's access records of every iteration (in failedLogDir). */
  keepLogs?: boolean;
  /** The image's layers (digest, compressed size) for per-layer figures. */
  layers?: ReadonlyArray<{ digest: string; size: number }>;
  /** Time each layer's lookup on a fresh store first (see probeLookups). */
  resolveProbe?: boolean;
  /** Sample the store's smaps during the iteration (bench/lib/rss-parts.ts). */
  rssParts?: boolean;
}

/**
 * One cold iteration: fresh Podman storage, fresh store root and mount point, pull, first run, then
 * tear everything down. Failures come back as a failed result with the reason, never as a throw.
 */
export async function runIteration(ctx: IterationContext): Promise<IterationResult> {
  const { mode, workload, path } = ctx;
  // Short on purpose: with a Podman runroot much longer than ~45 characters every `podman run` stalls
  // 20 s ("Exceeded conmon timeout waiting for container to exit"), measured on Podman 4.3.1.
  const dir = runDir(ctx.workDir, ctx.seq);
  const name = `${workload.label ?? workload.name}-${path.profile.name}-${mode.id}-${ctx.iteration}`;
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  // Start on an idle disk: a full pull before this run leaves ~600 MB being written back, and the
  // run right after it paid for that (go-s11: our pull phase 0.28-0.37 s after the full pull
  // against 0.23-0.27 s in runs with no full pull before them; the Go store ran later).
  await run('sync', []);
  const ref = `${path.refHost}/bench/${workload.name}:${mode.format}`;
  const res: IterationResult = { iteration: ctx.iteration, ok: false };
  let parts: RssPartsSampler | undefined;
  let store: RunningStore | undefined;
  let podman: PodmanEnv | undefined;
  let lookupMs: number[] | undefined;
  const mnt = join(dir, 'm');
  // teardown order: Podman first (an ALS must still be mounted to see its release), then the store
  const teardown = onCleanup(`iteration ${dir}`, async () => {
    if (podman) await podman.destroy().catch(() => undefined);
    if (store) {
      const s = await store.stop();
      res.storeForcedUnmount = s.forcedUnmount;
      if (res.layers && mode.store === 'ours') {
        // the log is complete once the store has exited
        const log = await readFile(join(dir, 'store.log'), 'utf8').catch(() => '');
        const byDigest = new Map(parseResolutions(log).map((r) => [r.digest, r.ms]));
        for (const l of res.layers) {
          const ms = byDigest.get(l.digest);
          if (ms !== undefined) l.resolveMs = ms;
        }
      }
      if ((!res.ok || ctx.keepLogs === true) && ctx.failedLogDir) {
        await mkdir(ctx.failedLogDir, { recursive: true });
        await copyFile(join(dir, 'store.log'), join(ctx.failedLogDir, `${name}.store.log`)).catch(
          () => undefined,
        );
      }
    }
    await unmountUnder(dir);
    await rm(dir, { recursive: true, force: true, maxRetries: 3 }).catch((e: Error) =>
      say(`cannot remove ${dir}: ${e.message}`),
    );
  });
  try {
    let storage: StorageMode = { kind: mode.storage === 'als' ? 'plain' : mode.storage };
    if (mode.storage === 'als') {
      const cmd = ctx.stores[mode.store ?? 'ours'];
      if (!cmd) throw new StoreError('E_CONFIG', `no ${mode.store ?? 'ours'} store command configured`);
      const storeRoot = join(dir, 'store-root');
      await mkdir(storeRoot, { recursive: true });
      let config = cmd.config;
      if (!config) {
        // an explicit (empty) config: a missing non-default config file is fatal for the Go store
        config = join(dir, 'store-config.toml');
        await writeFile(config, '# sgz benchmark: store defaults\n');
      }
      if (ctx.resolveProbe && ctx.layers) {
        lookupMs = await probeLookups(dir, cmd, config, ref, ctx.layers, path.prefix);
        // let the probe store's cut-off responses reach the access log before the window opens
        await path.registry.settle(300, 3000);
      }
      res.storeStartFailed = true;
      store = await startStore({
        command: cmd.argv,
        root: storeRoot,
        mountpoint: mnt,
        addr: join(dir, 'store.sock'),
        config,
        logLevel: cmd.logLevel,
        ...(cmd.flags ? { flags: cmd.flags } : {}),
        ...(cmd.extraArgs ? { extraArgs: cmd.extraArgs } : {}),
        prefix: path.prefix,
        stopSignal: cmd.stopSignal,
        logFile: join(dir, 'store.log'),
      });
      delete res.storeStartFailed;
      if (ctx.rssParts === true) parts = sampleRssParts(store.pid);
      storage = { kind: 'als', mount: mnt };
    }
    podman = await PodmanEnv.create({
      dir: join(dir, 'p'),
      storage,
      insecureRegistries: [path.refHost],
      prefix: path.prefix,
    });
    const mark = path.registry.mark();
    res.pullMs = await podman.pull(ref);
    const afterPull = path.registry.mark();
    if (mode.storage === 'als') {
      const c = await podman.alsLayerCount(mnt);
      res.lazyLayers = c.lazy;
      res.totalLayers = c.total;
    }
    const r = await podman.runImage(ref, undefined, workload.runCmd);
    res.runMs = r.ms;
    res.totalMs = res.pullMs + res.runMs;
    res.output = tail(r.output.trim(), 400);
    // responses are logged when they complete: a short grace, then a fixed window end (so a store's
    // background fetch after the first run is not counted)
    await sleep(300);
    const end = path.registry.mark();
    res.registry = path.registry.usageSince(mark, end);
    if (ctx.keepLogs === true && ctx.failedLogDir) {
      // request by request, the pull phase first (afterPull: the first record of the run phase)
      await mkdir(ctx.failedLogDir, { recursive: true });
      const recs = path.registry
        .records(mark, end)
        .map((r) => ({ ...r, phase: r.seq < afterPull ? 'pull' : 'run' }));
      await writeFile(join(ctx.failedLogDir, `${name}.access.json`), JSON.stringify(recs, null, 1));
    }
    res.pullRegistry = path.registry.usageSince(mark, afterPull);
    res.runRegistry = summarizeAccess(path.registry.records(afterPull, end));
    if (ctx.layers) {
      const per = blobUsage(path.registry.records(mark, end));
      res.imageBlobBytes = ctx.layers.reduce((a, l) => a + l.size, 0);
      res.layers = ctx.layers.map((l) => ({
        digest: l.digest,
        blobBytes: l.size,
        startBytes: per[l.digest]?.bytes ?? 0,
        startRequests: per[l.digest]?.requests ?? 0,
      }));
      lookupMs?.forEach((ms, i) => {
        if (res.layers?.[i]) res.layers[i].lookupMs = ms;
      });
    }
    if (workload.kind === 'model-load') {
      const t = parseModelLoadOutput(r.output);
      if (t) {
        res.coldReadMs = t.coldMs;
        res.warmReadMs = t.warmMs;
        res.readBytes = workload.modelShard?.bytes;
      }
    }
    const peakParts = parts?.peak();
    if (peakParts) res.storePeakParts = peakParts;
    if (store) {
      const s = await store.sample();
      if (s) {
        res.storePeakRssKiB = s.peakRssKiB;
        res.storeCpuMs = s.cpuMs;
      }
    }
    const missing = workload.expect.filter((e) => !r.output.includes(e));
    if (missing.length > 0) {
      throw new StoreError(
        'E_DIGEST_MISMATCH',
        `first run printed unexpected output (wanted "${missing[0]}")`,
        { ref },
      );
    }
    res.ok = true;
  } catch (err) {
    res.ok = false;
    res.error = err instanceof Error ? err.message : String(err);
    if (store) res.error += ` | store log: ${store.logTail(600)}`;
  } finally {
    await parts?.stop();
    await teardown();
  }
  return res;
}
