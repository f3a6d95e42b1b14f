import { Command } from 'commander';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import {
  loadConfigIsolated,
  DEFAULT_ADDR,
  DEFAULT_CONFIG_PATH,
  DEFAULT_ROOT,
  type ConfigFlags,
  type StoreConfig,
} from '../store/config.js';
import { controlRequest, startControlSocket, type ControlServer } from '../store/control-socket.js';
import type { LogFormat, Logger } from '../util/logger.js';
import { sdNotify } from '../util/sd-notify.js';
import { withDeadline } from '../util/abort.js';
import { StoreError, asStoreError } from '../util/errors.js';
import { mountType } from '../fs/mount-util.js';
// Only light modules at the top: the registry (undici), cache, layer engine and FUSE store are
// loaded by buildStore() (build-store.ts), so `--help`, `--version` and the other commands start fast.
import { buildStore, type BuiltStore } from './build-store.js';
import { guardUnhandledRejections } from './rejection-guard.js';
import { checkMountpointKind, checkMountpointOperand } from './command-guard.js';
import { acquireInstanceLock, type InstanceLock } from './instance-lock.js';
import { rootLayout, socketLock } from '../util/root-layout.js';
import type { MetricsServer } from '../store/metrics-server.js';
import { settleArrayBufferDetaching } from '../util/detach-protector.js';

/**
 * `stargz-store [--config F] [--log-level L] [--root DIR] [--addr SOCK] <mountpoint>`: the default
 * command, a drop-in for the Go stargz-store's command line (Go `flag` also accepts `-log-level=x`).
 *
 * Start-up: config -> root (0700) -> clear a stale mount -> mountpoint -> registry, cache, store ->
 * mount -> control socket -> READY=1 once the mount answers (probed from a child process: a
 * synchronous stat of our own mount from this process would deadlock) -> wait.
 * SIGINT and SIGTERM: STOPPING=1, close the socket, unmount, exit 0 (the Go store only cleans up on
 * SIGINT; its unit needs ExecStopPost=umount for SIGTERM).
 */

const GO_FLAGS = ['config', 'log-level', 'root', 'addr'];

/** `-log-level=debug` / `-root DIR` (Go flag syntax) -> `--log-level=debug` / `--root DIR`. */
export function normalizeGoStyleArgs(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (const a of argv) {
    if (a === '--') {
      out.push(...argv.slice(out.length));
      break;
    }
    const m = /^-([a-z-]+)(=.*)?$/.exec(a);
    out.push(m !== null && GO_FLAGS.includes(m[1]!) ? `-${a}` : a);
  }
  return out;
}

/** The serve command normalises Go-style flags itself, so main.ts needs no special argv handling. */
class ServeCommand extends Command {
  override parseOptions(argv: string[]): { operands: string[]; unknown: string[] } {
    return super.parseOptions(normalizeGoStyleArgs(argv));
  }
}

interface ServeFlags {
  config?: string;
  logLevel?: string;
  root?: string;
  addr?: string;
  recordAccesses?: string;
  metricsAddress?: string;
  set?: string[];
  logFormat?: LogFormat | 'auto';
}

export function registerServeCommand(program: Command): void {
  const serve = new ServeCommand('serve')
    .description(
      'mount the Additional Layer Store at <mountpoint> and serve until SIGINT/SIGTERM (default command)',
    )
    .argument('[mountpoint]', 'where Podman/CRI-O find the store, e.g. /var/lib/stargz-store/store')
    .option('--config <file>', `TOML config (a missing file is fatal unless it is ${DEFAULT_CONFIG_PATH})`)
    .option('--log-level <level>', 'trace, debug, info, warn, error, fatal', 'info')
    .option(
      '--log-format <format>',
      'json (one object per line) or text (readable, coloured); default: text on a terminal, else json',
      parseLogFormat,
    )
    .option('--root <dir>', `state root (cache, metadata)`, DEFAULT_ROOT)
    .option('--addr <sock>', `control socket for stargz-store-helper and status`, DEFAULT_ADDR)
    .option(
      '--record-accesses <file>',
      'append one JSON line per first open/readlink of each layer file (same as [debug] record_accesses)',
    )
    .option(
      '--metrics-address <host:port>',
      'serve Prometheus /metrics there (config metrics_address; off by default)',
    )
    .option(
      '--set <key=value>',
      'override a config.toml key, e.g. blob.chunk_size=100000 (repeatable)',
      collect,
      [],
    )
    .action(async (mountpoint: string | undefined, o: ServeFlags) => {
      // Before anything is created: `stargz-store stauts` must not mount a store at ./stauts.
      if (mountpoint !== undefined) {
        await checkMountpointOperand(
          mountpoint,
          program.commands.map((c) => c.name()),
        );
      }
      const code = await runServe(
        {
          mountpoint,
          config: o.config,
          logLevel: o.logLevel,
          root: o.root,
          addr: o.addr,
          set: o.set,
          ...(o.recordAccesses !== undefined ? { recordAccesses: o.recordAccesses } : {}),
          ...(o.metricsAddress !== undefined ? { metricsAddress: o.metricsAddress } : {}),
        },
        { logFormat: o.logFormat ?? 'auto' },
      );
      process.exit(code);
    });
  program.addCommand(serve, { isDefault: true });
}

function collect(v: string, prev: string[]): string[] {
  return [...prev, v];
}

function parseLogFormat(v: string): LogFormat | 'auto' {
  if (v === 'auto' || v === 'json' || v === 'text') return v;
  throw new StoreError('E_INVALID_ARGUMENT', `--log-format must be json, text or auto, got '${v}'`);
}

/**
 * Lazily detaches whatever FUSE mount is at `mountpoint` (fusermount -u -z, from a child process:
 * it must not wait on our own FUSE loop). Used when the normal unmount failed or could not run.
 */
function lazyUnmount(mountpoint: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile('fusermount', ['-u', '-z', '--', mountpoint], { timeout: 5000 }, (err) => resolve(!err));
  });
}

/** Waits until `mountpoint` is a FUSE mount that answers a stat from another process. */
export async function waitForMountLive(
  mountpoint: string,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastWhy = 'not mounted yet';
  while (Date.now() < deadline) {
    if (signal?.aborted) throw new StoreError('E_ABORTED', 'stopped while waiting for the mount');
    if (await isFuseMount(mountpoint)) {
      const left = Math.max(100, deadline - Date.now());
      const r = await statInChild(mountpoint, Math.min(left, 5000));
      if (r === undefined) return;
      lastWhy = r;
    }
    await new Promise((res) => setTimeout(res, 25));
  }
  throw new StoreError(
    'E_DEADLINE',
    `mount at ${mountpoint} did not answer within ${timeoutMs} ms: ${lastWhy}`,
    {
      path: mountpoint,
    },
  );
}

async function isFuseMount(mountpoint: string): Promise<boolean> {
  return (await mountType(mountpoint))?.startsWith('fuse') === true;
}

/** undefined when `stat` in a child succeeded; else the reason. */
function statInChild(path: string, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile('stat', ['-c', '%i', '--', path], { timeout: timeoutMs }, (err, _out, stderr) => {
      resolve(err ? String(stderr).trim() || err.message : undefined);
    });
  });
}

/** Runs the store until a signal; returns the process exit code. Start-up errors are thrown. */
export async function runServe(
  flags: ConfigFlags,
  opts: { logFormat?: LogFormat | 'auto' } = {},
): Promise<number> {
  // Signals first, so a SIGTERM during start-up still unmounts whatever was mounted.
  const stop = new AbortController();
  let stopSignal: string | undefined;
  // Set once a mount may exist at the mountpoint (from the mount call on): a hurried exit detaches it.
  let mountpointToClear: string | undefined;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (stopSignal !== undefined) {
      // Second signal while stopping: the operator insists. Exit now, but never leave a dead mount.
      process.stderr.write(`stargz-store: ${sig} again while stopping; exiting now\n`);
      if (mountpointToClear === undefined) process.exit(1);
      void lazyUnmount(mountpointToClear).finally(() => process.exit(1));
      return;
    }
    stopSignal = sig;
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const { config, warnings, notes } = await loadConfigIsolated(flags);
  const { createLogger } = await import('../util/logger.js'); // pino: not needed by other commands
  const logger = createLogger(config.logLevel, opts.logFormat ?? 'json');
  for (const w of warnings) logger.warn({ file: config.configFile }, w);
  for (const n of notes) logger.debug({ file: config.configFile }, n);
  // for the process's lifetime: runServe's caller exits when it returns
  guardUnhandledRejections(logger);

  let built: BuiltStore | undefined;
  let mounted: { unmount(): Promise<void> } | undefined;
  let control: ControlServer | undefined;
  const locks: InstanceLock[] = [];
  let metricsServer: MetricsServer | undefined;
  const startedAt = new Date().toISOString();

  const cleanup = async (): Promise<number> => {
    let code = 0;
    await sdNotify('STOPPING=1').catch((err: unknown) =>
      logger.warn({ err: asStoreError(err) }, 'sd_notify STOPPING failed'),
    );
    await metricsServer?.close();
    if (control)
      await control.close().catch((err: unknown) => logger.warn({ err }, 'closing control socket failed'));
    if (mounted) {
      try {
        const unmounting = mounted.unmount();
        await withDeadline(UNMOUNT_TIMEOUT_MS, () => unmounting, {
          what: `unmount of ${config.mountpoint}`,
        });
      } catch (err) {
        code = 1;
        logger.error({ err: asStoreError(err), mountpoint: config.mountpoint }, 'unmount failed');
      }
    }
    // A mount call that failed or was interrupted may still have left a FUSE mount; so may a failed
    // unmount. We hold the root lock, so a FUSE mount at our mountpoint is ours: detach it.
    if (mountpointToClear !== undefined && (await isFuseMount(mountpointToClear))) {
      const ok = await lazyUnmount(mountpointToClear);
      logger.warn({ mountpoint: mountpointToClear, ok }, 'detached the FUSE mount (fusermount -u -z)');
    }
    mountpointToClear = undefined;
    if (built) await built.close().catch((err: unknown) => logger.warn({ err }, 'closing the store failed'));
    for (const l of locks.splice(0).reverse()) await l.release();
    return code;
  };

  try {
    await mkdir(config.root, { recursive: true, mode: 0o700 });
    // One store per root and per socket, decided before anything is touched: a second store must
    // neither clear the first one's mount as "stale" nor replace its control socket.
    locks.push(await acquireInstanceLock(rootLayout(config.root).instanceLock, `root ${config.root}`));
    await mkdir(dirname(config.addr), { recursive: true, mode: 0o700 });
    locks.push(await acquireInstanceLock(socketLock(config.addr), `control socket ${config.addr}`));
    await refuseLiveSocket(config.addr);
    await checkMountpointKind(config.mountpoint);
    // Logged once the operator's usual mistakes (busy root or socket, bad mountpoint) are ruled out, so
    // those fail with their one line alone.
    logger.info(
      {
        mountpoint: config.mountpoint,
        root: config.root,
        addr: config.addr,
        config: config.configFile ?? '(defaults)',
      },
      'stargz-store starting',
    );
    // (mountStore clears a stale mount left by a crashed store and creates the mountpoint)
    if (stop.signal.aborted) return await finish(cleanup, logger, stopSignal);

    built = await buildStore(config, logger);
    if (stop.signal.aborted) return await finish(cleanup, logger, stopSignal);
    mountpointToClear = config.mountpoint;
    if (config.metricsAddress !== '') {
      const { startMetricsServer } = await import('../store/metrics-server.js'); // prom-client
      metricsServer = await startMetricsServer(config.metricsAddress, logger);
    }
    // Before the mount exists, so the first lookups meet compiled TOC code (toc-reader.ts). An
    // optimisation only: a failure is logged, never fatal. Imported here: one-shot commands load no codecs.
    const { warmUpTocPipeline } = await import('../format/toc-reader.js');
    const warmStart = performance.now();
    settleArrayBufferDetaching();
    await warmUpTocPipeline().then(
      () => logger.debug({ ms: Math.round(performance.now() - warmStart) }, 'TOC pipeline warmed up'),
      (err: unknown) => logger.warn({ err }, 'TOC pipeline warm-up failed'),
    );
    // the rest of a first lookup (registry client, resolver, layer engine) likewise
    const { rehearseFirstLookups } = await import('../store/rehearsal.js');
    await rehearseFirstLookups({ root: rootLayout(config.root).rehearsal }).then(
      ({ ms }) => {
        // its garbage goes before the first client (bin/node-options exposes gc; absent: no-op)
        (globalThis as { gc?: () => void }).gc?.();
        logger.debug({ ms: Math.round(ms) }, 'first lookups rehearsed');
      },
      (err: unknown) =>
        logger.warn({ err }, 'first-lookup rehearsal failed (the first lookups may be slower)'),
    );
    mounted = await built.mount(config.mountpoint);
    if (stop.signal.aborted) return await finish(cleanup, logger, stopSignal);

    const store = built;
    control = await startControlSocket(
      config.addr,
      {
        addCredentials: (map) => store.addCredentials(map),
        ...(store.pins ? { pins: store.pins } : {}),
        // one chunk at a time: the store keeps serving while it checks
        check: async (repair) =>
          (await import('../store/check.js')).checkStoreRoot(config.root, {
            repair,
            running: true,
            concurrency: 1,
          }),
        status: async () => ({
          pid: process.pid,
          mountpoint: config.mountpoint,
          root: config.root,
          startedAt,
          layers: await store.status(),
        }),
      },
      { logger },
    );

    await waitForMountLive(config.mountpoint, config.deadlines.fuseSec * 1000, stop.signal).catch(
      (err: unknown) => {
        if (!stop.signal.aborted) throw err;
      },
    );
    if (stop.signal.aborted) return await finish(cleanup, logger, stopSignal);

    if (
      await sdNotify('READY=1').catch((err: unknown) =>
        logger.error({ err: asStoreError(err) }, 'sd_notify READY failed'),
      )
    ) {
      logger.debug('sent READY=1');
    }
    logger.info({ mountpoint: config.mountpoint, pid: process.pid }, 'stargz-store ready');

    await new Promise<void>((resolve) => {
      if (stop.signal.aborted) resolve();
      else stop.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    return await finish(cleanup, logger, stopSignal);
  } catch (err) {
    const e = asStoreError(err);
    // main.ts prints the one-line reason; the structured record (with the stack) is for debugging.
    logger.debug({ err: e }, 'start-up failed');
    await cleanup();
    await flush(logger);
    // Anything still holding the loop (sockets, FUSE thread) must not keep a failed store alive.
    setTimeout(() => process.exit(1), 2000).unref();
    throw e;
  }
}

const UNMOUNT_TIMEOUT_MS = 20_000;

/** A control socket that answers belongs to a running store (maybe one without our lock file). */
async function refuseLiveSocket(addr: string): Promise<void> {
  if (!existsSync(addr)) return;
  let pid: unknown;
  try {
    const resp = await controlRequest(addr, { op: 'status' }, { timeoutMs: 2000 });
    pid = (resp.status as { pid?: unknown } | undefined)?.pid;
  } catch (err) {
    const errno = asStoreError(err).context.errno;
    if (errno === 'ECONNREFUSED' || errno === 'ENOENT') return; // nobody listens: stale, replaced later
    pid = undefined; // something answered (slowly or oddly): still not ours to take
  }
  throw new StoreError(
    'E_INVALID_ARGUMENT',
    `another stargz-store${typeof pid === 'number' ? ` (pid ${pid})` : ''} answers on control socket ${addr}; stop it first`,
    { path: addr },
  );
}

async function finish(
  cleanup: () => Promise<number>,
  logger: Logger,
  sig: string | undefined,
): Promise<number> {
  logger.info({ signal: sig }, 'stopping');
  const code = await cleanup();
  logger.info({ code }, 'stargz-store stopped');
  await flush(logger);
  return code;
}

function flush(logger: Logger): Promise<void> {
  return new Promise((resolve) => {
    logger.flush(() => resolve());
  });
}

export type { StoreConfig };
