/**
 * Container start-up benchmark (issue 6). `npm run bench -- --quick` for the smoke run; see
 * bench/README.md for the full run. Builds the workloads offline, pushes them in every format, then
 * runs cold pull + first run per mode, image and network profile, and writes JSON, markdown and SVG.
 */
import { access, mkdir, rm, writeFile } from 'node:fs/promises';
import { cpus, release, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CommanderError } from 'commander';
import { isStoreError, StoreError } from '../../src/util/errors.js';
import { aborting, installSignalCleanup, runCleanups } from '../lib/cleanup.js';
import { unmountUnder } from '../lib/mounts.js';
import { removeStaleNamespaces } from '../lib/netns.js';
import { PodmanEnv } from '../lib/podman.js';
import { requireTools, run, say, setBeforeSay } from '../lib/proc.js';
import { startProgress, wantsProgress } from '../../src/cli/progress.js';
import { profileSource } from '../lib/profile.js';
import { startBenchRegistry } from '../lib/registry-server.js';
import { formatParts } from '../lib/rss-parts.js';
import { describeFlags, resolveLaunchFlags } from '../lib/store-flags.js';
import { startStore } from '../lib/store-process.js';
import { checkLink, measureProxyOverhead } from './calibrate.js';
import { ensureFormats, type FormatId, type FormatOutcome } from './formats.js';
import {
  MAX_PODMAN_DIR,
  runDir,
  runIteration,
  selectModes,
  type StoreCommand,
  type StoreKind,
} from './modes.js';
import { openNetworkPath } from './networks.js';
import { parseOptions, type HarnessOptions } from './options.js';
import type { Cell } from './report.js';
import { writeOutputs, type Results } from './results.js';
import { buildWorkloads, modelLoadVariant, type Workload } from './workloads.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));

async function machine(): Promise<Record<string, unknown>> {
  const podman = await run('podman', ['--version'], { allowFail: true });
  const c = cpus();
  return {
    cpuModel: c[0]?.model ?? 'unknown',
    cpus: c.length,
    memGiB: +(totalmem() / 2 ** 30).toFixed(1),
    kernel: release(),
    node: process.version,
    podman: podman.stdout.trim(),
  };
}

async function storeCommands(o: HarnessOptions): Promise<Partial<Record<StoreKind, StoreCommand>>> {
  const ours: StoreCommand = {
    argv: o.storeBin
      ? o.storeBin.split(/\s+/).filter(Boolean)
      : // the launcher production runs: the pinned Node with bin/node-options, whatever node runs the harness
        [join(REPO, 'bin/stargz-store')],
    stopSignal: 'SIGTERM',
    logLevel: o.storeLogLevel,
    ...(o.storeConfig ? { config: resolve(o.storeConfig) } : {}),
  };
  const out: Partial<Record<StoreKind, StoreCommand>> = { ours };
  if (o.baselineStore) {
    const argv = [resolve(o.baselineStore)];
    const flags = await resolveLaunchFlags(argv, o.baselineFlavour);
    say(
      `baseline store ${argv[0]}: ${describeFlags(flags)} (${o.baselineFlavour === 'auto' ? 'probed --help' : `--baseline-flavour ${o.baselineFlavour}`}): --${flags.join(' --')}`,
    );
    const config = o.baselineConfig ?? o.storeConfig;
    out.baseline = {
      argv,
      stopSignal: o.baselineStopSignal,
      logLevel: o.storeLogLevel,
      flags,
      ...(o.baselineArgs.length > 0 ? { extraArgs: o.baselineArgs } : {}),
      ...(config ? { config: resolve(config) } : {}),
    };
  }
  return out;
}

/**
 * Start each store once on a scratch mount before any iteration: a store that cannot start (a flag
 * it rejects, a bad config) is reported once with its own words, and its modes are skipped, instead
 * of one failed run per iteration. Returns the reason per store kind that failed.
 */
async function preflightStores(
  workDir: string,
  stores: Partial<Record<StoreKind, StoreCommand>>,
  kinds: ReadonlySet<StoreKind>,
): Promise<Map<StoreKind, string>> {
  const failed = new Map<StoreKind, string>();
  for (const kind of kinds) {
    const cmd = stores[kind];
    if (!cmd) continue;
    const dir = join(workDir, 'r', `preflight-${kind}`);
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    let config = cmd.config;
    if (!config) {
      config = join(dir, 'store-config.toml');
      await writeFile(config, '# sgz benchmark: store defaults\n');
    }
    try {
      const st = await startStore({
        command: cmd.argv,
        root: join(dir, 'root'),
        mountpoint: join(dir, 'm'),
        addr: join(dir, 'store.sock'),
        config,
        logLevel: cmd.logLevel,
        ...(cmd.flags ? { flags: cmd.flags } : {}),
        ...(cmd.extraArgs ? { extraArgs: cmd.extraArgs } : {}),
        stopSignal: cmd.stopSignal,
        logFile: join(dir, 'store.log'),
      });
      const stopped = await st.stop();
      if (stopped.forcedUnmount) {
        say(`NOTE: the ${kind} store left its mount behind on ${cmd.stopSignal} (lazily unmounted)`);
      }
      say(`${kind} store starts and stops cleanly: ${cmd.argv.join(' ')}`);
    } catch (e) {
      const why = (e as Error).message.replace(/\s+/g, ' ').slice(0, 600);
      failed.set(kind, `the ${kind} store does not start: ${why}`);
      say(`ERROR: the ${kind} store does not start; its modes are skipped. ${why}`);
    } finally {
      await unmountUnder(dir);
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    }
  }
  return failed;
}

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2), REPO);
  installSignalCleanup();
  const started = performance.now();
  if (process.getuid?.() !== 0)
    throw new StoreError('E_CONFIG', 'the benchmark needs root (mounts, namespaces, podman)');
  const modes = selectModes(o.modes, o.baselineStore !== undefined);
  const needFormats = new Set<FormatId>(modes.map((m) => m.format));
  await requireTools({
    podman: 'podman',
    skopeo: 'skopeo',
    runc: 'runc',
    tar: 'tar',
    unshare: 'util-linux',
    nsenter: 'util-linux',
    curl: 'curl',
    python3: 'python3',
    '/usr/bin/docker-registry': 'docker-registry',
    ...(needFormats.has('esgz-opt') && o.profile === 'strace' ? { strace: 'strace' } : {}),
    ...(o.shaper === 'htb' ? { ip: 'iproute2', tc: 'iproute2' } : {}),
  });
  const storeProfile = needFormats.has('esgz-opt') && o.profile === 'store';
  if ((storeProfile || modes.some((m) => m.store === 'ours')) && !o.storeBin) {
    await access(join(REPO, 'dist/src/cli/main.js')).catch(() =>
      say(
        'WARNING: dist/src/cli/main.js missing (run npm run build); lazy modes and the store profile will fail',
      ),
    );
  }
  if (join(runDir(resolve(o.workDir), 9999), 'p').length > MAX_PODMAN_DIR) {
    throw new StoreError(
      'E_CONFIG',
      `--work-dir ${o.workDir} is too long: Podman 4.3 stalls 20 s per run when its runroot path is long; use <= ${MAX_PODMAN_DIR - 9} characters`,
    );
  }
  await mkdir(o.workDir, { recursive: true });
  for (const stale of await removeStaleNamespaces()) say(`removed stale namespace ${stale}`);
  for (const sub of ['r', 'mnt'])
    for (const m of await unmountUnder(join(o.workDir, sub))) say(`unmounted stale ${m}`);

  const res: Results = {
    version: 1,
    startedAt: new Date().toISOString(),
    complete: false,
    machine: await machine(),
    options: { ...o, networks: o.networks.map((n) => n.name) },
    workloads: [],
    calibration: { links: [] },
    summaries: [],
    cells: [],
  };

  say(`workloads: ${o.images.join(', ')} (large scale ${o.scale})`);
  const workloads = await buildWorkloads(o.images, {
    workDir: o.workDir,
    scale: o.scale,
    seed: o.seed,
    suite: o.suite,
    ...(o.mirror ? { mirror: o.mirror } : {}),
  });

  const registry = await startBenchRegistry({
    dataDir: join(o.workDir, 'registry', 'data'),
    confDir: join(o.workDir, 'registry'),
  });
  say(`registry ${registry.host} (pid ${registry.pid})`);
  const buildEnv = await PodmanEnv.create({
    dir: join(o.workDir, 'build-storage'),
    storage: { kind: 'plain' },
    insecureRegistries: [registry.host],
  });
  const source = profileSource(o.profile);
  const stores = await storeCommands(o);
  const outcomes = new Map<string, FormatOutcome[]>();
  for (const w of workloads) {
    const fo = await ensureFormats(
      {
        workDir: o.workDir,
        registry,
        buildEnv,
        profileSource: source,
        ...(stores.ours ? { store: stores.ours } : {}),
      },
      w,
      [...needFormats],
    );
    outcomes.set(w.name, fo);
    res.workloads.push({
      name: w.name,
      key: w.key,
      layers: w.layers.length,
      uncompressedBytes: w.uncompressedBytes,
      ...(w.touchedBytes ? { touchedBytes: w.touchedBytes } : {}),
      images: Object.fromEntries(
        fo.map((f) => [
          f.format,
          f.image
            ? {
                compressedBytes: f.image.compressedBytes,
                manifestDigest: f.image.manifestDigest,
                ...(f.image.prioritized ? { prioritized: f.image.prioritized } : {}),
                ...(f.image.notPrioritized ? { notPrioritized: f.image.notPrioritized } : {}),
              }
            : { error: f.error },
        ]),
      ),
    });
  }
  if (o.buildOnly) {
    res.complete = true;
    await writeOutputs(o, res);
    return;
  }
  const storeFailures = await preflightStores(
    o.workDir,
    stores,
    new Set(modes.flatMap((m) => (m.store ? [m.store] : []))),
  );
  res.storeFailures = Object.fromEntries(storeFailures);
  // what each first run does: the image's entrypoint and/or reading a whole model shard
  const runs: Workload[] = [];
  for (const w of workloads) {
    for (const k of o.workloads) {
      if (k === 'startup') runs.push(w);
      else if (w.modelShard) runs.push(await modelLoadVariant(w));
    }
  }

  // calibration on the biggest gzip blob we have
  const gz = [...outcomes.values()].flat().find((f) => f.format === 'gzip' && f.image)?.image;
  const biggest = gz
    ? [...outcomes.values()]
        .flat()
        .filter((f) => f.format === 'gzip' && f.image)
        .flatMap((f) => f.image!.layers.map((l) => ({ repo: f.image!.repo, ...l })))
        .sort((a, b) => b.size - a.size)[0]
    : undefined;
  const blobPath = biggest ? `/v2/${biggest.repo}/blobs/${biggest.digest}` : undefined;
  if (
    biggest &&
    blobPath &&
    o.networks.some((n) => n.rateMbit !== undefined || n.rttMs > 0) &&
    o.shaper === 'proxy'
  ) {
    try {
      res.calibration.proxyOverhead = await measureProxyOverhead(registry.host, blobPath, biggest.size);
      say(`proxy overhead: ${JSON.stringify(res.calibration.proxyOverhead)}`);
    } catch (e) {
      res.calibration.proxyOverhead = { error: (e as Error).message };
    }
  }

  let seq = 0;
  // one bar over all iterations, on a terminal stdout only (startProgress decides); log lines clear it
  const bar = startProgress('bench iterations', {
    stream: process.stdout,
    total: o.networks.length * runs.length * modes.length * o.iterations,
    unit: 'count',
  });
  if (wantsProgress(process.stdout)) setBeforeSay(() => process.stdout.write('\r\x1b[2K'));
  const stopBar = (): void => {
    bar.stop();
    setBeforeSay(undefined);
  };
  let ran = 0;
  for (const net of o.networks) {
    const path = await openNetworkPath(net, o.shaper, {
      registry,
      registryDataDir: join(o.workDir, 'registry', 'data'),
      confDir: join(o.workDir, 'registry'),
    });
    try {
      if (path.shaper !== 'none' && biggest && blobPath) {
        try {
          const l = await checkLink(path, blobPath, biggest.size);
          res.calibration.links.push(l);
          say(`link ${net.name}: ${l.achievedMbit.toFixed(1)} Mbit/s, TTFB ${l.ttfbMs.toFixed(1)} ms`);
        } catch (e) {
          res.calibration.links.push({ network: net.name, error: (e as Error).message });
        }
      }
      for (const w of runs) {
        const fo = outcomes.get(w.name)!;
        const cells = new Map<string, Cell>();
        for (const m of modes) {
          const f = fo.find((x) => x.format === m.format);
          const cell: Cell = {
            image: w.label ?? w.name,
            network: net.name,
            mode: m.id,
            label: m.label,
            format: m.format,
            iterations: [],
          };
          if (!f?.image) cell.skipped = `format ${m.format} not available: ${f?.error ?? 'not built'}`;
          else if (m.store && storeFailures.has(m.store)) cell.skipped = storeFailures.get(m.store)!;
          cells.set(m.id, cell);
          res.cells.push(cell);
        }
        // iterations outermost: modes interleave, so slow drifts of the shared machine spread evenly
        for (let i = 1; i <= o.iterations; i++) {
          for (const m of modes) {
            const cell = cells.get(m.id)!;
            // a mode that failed once is not retried in the same cell (keeps broken modes cheap)
            if (cell.skipped || cell.iterations.some((r) => !r.ok)) continue;
            if (m.store && storeFailures.has(m.store)) {
              if (cell.iterations.length === 0) cell.skipped = storeFailures.get(m.store)!;
              continue;
            }
            if (aborting()) return stopBar();
            const image = fo.find((x) => x.format === m.format)?.image;
            const r = await runIteration({
              ...(image ? { layers: image.layers } : {}),
              resolveProbe: o.resolveProbe && w.kind !== 'model-load',
              rssParts: o.rssParts,
              workDir: o.workDir,
              path,
              workload: w,
              mode: m,
              iteration: i,
              stores,
              seq: ++seq,
              failedLogDir: join(o.out, 'logs'),
              keepLogs: o.keepLogs,
            });
            // an iteration cut short by Ctrl-C is not a measurement
            if (aborting()) return stopBar();
            cell.iterations.push(r);
            if (r.storeStartFailed && m.store && !storeFailures.has(m.store)) {
              // said once; the store's other cells are skipped instead of failing one by one
              const why = `the ${m.store} store stopped starting: ${(r.error ?? '').replace(/\s+/g, ' ').slice(0, 600)}`;
              storeFailures.set(m.store, why);
              res.storeFailures = Object.fromEntries(storeFailures);
              say(`ERROR: ${why}; its remaining modes are skipped`);
            }
            say(
              r.ok
                ? `${cell.image} ${net.name} ${m.id} #${i}: pull ${(r.pullMs! / 1000).toFixed(2)} s, run ${(r.runMs! / 1000).toFixed(2)} s, registry ${(r.registry!.bytes / 1e6).toFixed(1)} MB / ${r.registry!.requests} req (run phase ${((r.runRegistry?.bytes ?? 0) / 1e6).toFixed(1)} MB)${r.storePeakRssKiB ? `, RSS ${(r.storePeakRssKiB / 1024).toFixed(0)} MB` : ''}${r.storePeakParts ? ` (at its peak, MB: ${formatParts(r.storePeakParts)})` : ''}${r.coldReadMs !== undefined && r.readBytes ? `, cold read ${(r.readBytes / 1e6 / (r.coldReadMs / 1000)).toFixed(0)} MB/s` : ''}${r.layers?.some((l) => l.resolveMs !== undefined) ? `, resolve ms ${r.layers.map((l) => l.resolveMs ?? '-').join('/')}` : ''}${r.layers?.some((l) => l.lookupMs !== undefined) ? `, lookup ms ${r.layers.map((l) => (l.lookupMs !== undefined ? l.lookupMs.toFixed(0) : '-')).join('/')}` : ''}${r.totalLayers !== undefined ? `, lazy layers ${r.lazyLayers}/${r.totalLayers}` : ''}`
                : `${cell.image} ${net.name} ${m.id} #${i}: FAILED ${r.error?.slice(0, 300)}`,
            );
            await writeOutputs(o, res);
            bar.update(++ran);
          }
        }
      }
    } catch (e) {
      stopBar();
      throw e;
    } finally {
      await path.close();
    }
  }
  stopBar();
  res.complete = true;
  res.finishedAt = new Date().toISOString();
  res.durationS = (performance.now() - started) / 1000;
  await writeOutputs(o, res);
  say(`done in ${res.durationS.toFixed(0)} s: ${join(o.out, 'results.md')}, results.json, chart.svg`);
}

main()
  .catch((err: unknown) => {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    const msg = isStoreError(err)
      ? `${err.code}: ${err.message}`
      : err instanceof Error
        ? (err.stack ?? err.message)
        : String(err);
    process.stderr.write(`bench: ${msg}\n`);
    process.exitCode = 1;
  })
  .finally(() => runCleanups());
