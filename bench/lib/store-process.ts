import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { StoreError } from '../../src/util/errors.js';
import { onCleanup } from './cleanup.js';
import { mountAt } from './mounts.js';
import { run, sleep, tail } from './proc.js';
import type { LaunchFlag } from './store-flags.js';

/**
 * Runs a store binary that takes the stargz-store flags
 * (`[--config F] [--log-level L] [--root DIR] [--addr SOCK] <mountpoint>`) — ours or a baseline such as
 * the Go stargz-store — and measures it. Readiness is "a FUSE file system is mounted at the mount
 * point" (works for every store, whether or not it speaks sd_notify).
 */

export interface StoreLaunchOptions {
  /** argv of the binary, e.g. [node, <repo>/bin/stargz-store.js] or [/usr/local/bin/stargz-store]. */
  command: string[];
  root: string;
  mountpoint: string;
  addr: string;
  /**
   * Flags the binary accepts (see store-flags.ts); a flag it lacks is left out (the Go store v0.12
   * rejects --addr). Undefined = all of them.
   */
  flags?: readonly LaunchFlag[];
  /** Appended after the flags, before the mount point (--baseline-args). */
  extraArgs?: readonly string[];
  config?: string;
  logLevel?: string;
  /** argv prefix (nsenter into the client network namespace). */
  prefix?: string[];
  /** The Go store only unmounts on SIGINT; ours on SIGTERM too. */
  stopSignal?: NodeJS.Signals;
  readyTimeoutMs?: number;
  logFile: string;
}

export interface ProcSample {
  /** VmHWM: peak resident set size. */
  peakRssKiB: number;
  /** user + system CPU of the process and its reaped children. */
  cpuMs: number;
}

export interface StopResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** The store left its mount behind and we had to lazily unmount it. */
  forcedUnmount: boolean;
}

export interface RunningStore {
  readonly pid: number;
  sample(): Promise<ProcSample | undefined>;
  logTail(max?: number): string;
  stop(): Promise<StopResult>;
}

let clkTck: number | undefined;
async function ticksPerSecond(): Promise<number> {
  if (clkTck === undefined) {
    const r = await run('getconf', ['CLK_TCK'], { allowFail: true });
    const n = Number(r.stdout.trim());
    clkTck = Number.isFinite(n) && n > 0 ? n : 100;
  }
  return clkTck;
}

/** Parse /proc/<pid>/stat and /proc/<pid>/status contents (pure). */
export function parseProcSample(stat: string, status: string, ticks: number): ProcSample {
  // comm (field 2) may contain spaces and parentheses: fields restart after the LAST ')'
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const field = (n: number) => Number(rest[n - 3] ?? 0);
  const cpuTicks = field(14) + field(15) + field(16) + field(17);
  const hwm = /^VmHWM:\s+(\d+)\s+kB/m.exec(status);
  return { peakRssKiB: hwm ? Number(hwm[1]) : 0, cpuMs: (cpuTicks * 1000) / ticks };
}

export async function sampleProcess(pid: number): Promise<ProcSample | undefined> {
  try {
    const [stat, status] = await Promise.all([
      readFile(`/proc/${pid}/stat`, 'utf8'),
      readFile(`/proc/${pid}/status`, 'utf8'),
    ]);
    return parseProcSample(stat, status, await ticksPerSecond());
  } catch {
    return undefined;
  }
}

/** The full command line of a store (pure). */
export function storeArgv(
  o: Pick<
    StoreLaunchOptions,
    'prefix' | 'command' | 'config' | 'logLevel' | 'root' | 'addr' | 'mountpoint' | 'flags' | 'extraArgs'
  >,
): string[] {
  const has = (f: LaunchFlag) => !o.flags || o.flags.includes(f);
  const argv = [...(o.prefix ?? []), ...o.command];
  if (o.config && has('config')) argv.push('--config', o.config);
  if (has('log-level')) argv.push('--log-level', o.logLevel ?? 'info');
  if (has('root')) argv.push('--root', o.root);
  if (has('addr')) argv.push('--addr', o.addr);
  argv.push(...(o.extraArgs ?? []), o.mountpoint);
  return argv;
}

export async function startStore(o: StoreLaunchOptions): Promise<RunningStore> {
  await mkdir(o.root, { recursive: true });
  await mkdir(o.mountpoint, { recursive: true });
  const argv = storeArgv(o);
  const log = createWriteStream(o.logFile, { flags: 'a' });
  const child: ChildProcess = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let recent = '';
  const onData = (b: Buffer) => {
    log.write(b);
    recent = (recent + b.toString()).slice(-32_000);
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let spawnError: Error | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('error', (e) => {
      spawnError = e;
      exit ??= { code: null, signal: null };
      resolve();
    });
    child.once('exit', (code, signal) => {
      exit = { code, signal };
      resolve();
    });
  });
  const pid = child.pid ?? -1;
  let last: ProcSample | undefined;

  let stopping: Promise<StopResult> | undefined;
  const stop = (): Promise<StopResult> => (stopping ??= doStop());
  const doStop = async (): Promise<StopResult> => {
    const s = await sampleProcess(pid);
    if (s) last = s;
    if (!exit) {
      child.kill(o.stopSignal ?? 'SIGTERM');
      await Promise.race([exited, sleep(15_000)]);
      if (!exit) {
        child.kill('SIGKILL');
        await exited;
      }
    }
    let forcedUnmount = false;
    for (let i = 0; i < 20 && (await mountAt(o.mountpoint))?.fsType.startsWith('fuse'); i++) {
      // give a clean shutdown a moment, then detach whatever is left
      if (i < 10) {
        await sleep(100);
        continue;
      }
      forcedUnmount = true;
      await run('fusermount', ['-u', '-z', o.mountpoint], { allowFail: true });
      await run('umount', ['-l', o.mountpoint], { allowFail: true });
    }
    await new Promise<void>((r) => log.end(() => r()));
    return { exitCode: exit?.code ?? null, signal: exit?.signal ?? null, forcedUnmount };
  };
  const undo = onCleanup(`store pid ${pid} at ${o.mountpoint}`, async () => {
    await stop();
  });

  const deadline = performance.now() + (o.readyTimeoutMs ?? 30_000);
  while (true) {
    if (exit) {
      await undo();
      const why = spawnError
        ? spawnError.message
        : `exit code ${String(exit.code)} signal ${String(exit.signal)}`;
      throw new StoreError('E_IO', `store exited before mounting (${why}): ${tail(recent, 1500)}`, {
        path: o.mountpoint,
      });
    }
    const m = await mountAt(o.mountpoint);
    if (m?.fsType.startsWith('fuse')) break;
    if (performance.now() > deadline) {
      await undo();
      throw new StoreError(
        'E_DEADLINE',
        `store did not mount within ${o.readyTimeoutMs ?? 30_000} ms: ${tail(recent, 1500)}`,
        {
          path: o.mountpoint,
        },
      );
    }
    await sleep(100);
  }

  return {
    pid,
    async sample() {
      const s = await sampleProcess(pid);
      if (s) last = s;
      return s ?? last;
    },
    logTail: (max = 2000) => tail(recent, max),
    async stop() {
      await undo();
      return await stop();
    },
  };
}
