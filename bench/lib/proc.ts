import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { access, constants } from 'node:fs/promises';
import { StoreError } from '../../src/util/errors.js';

/** Child processes for the bench tooling: always async, bounded output capture, typed failures. */

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  input?: string | Buffer;
  /** Kill the child (SIGKILL) after this long; the result then has `timedOut`. */
  timeoutMs?: number;
  /** Return a failed result instead of throwing on non-zero exit. */
  allowFail?: boolean;
  /** Keep at most this many bytes of stdout (default 16 MiB) and stderr (64 KiB, the tail). */
  maxStdout?: number;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
  timedOut: boolean;
}

const STDERR_KEEP = 64 * 1024;

/** Children started by run() that have not exited yet (so Ctrl-C can stop them first). */
const active = new Set<ChildProcess>();

/** SIGTERM every child of run() still running, SIGKILL what is left after `graceMs`. */
export async function terminateChildren(graceMs = 5000): Promise<void> {
  const kids = [...active];
  if (kids.length === 0) return;
  const gone = Promise.all(
    kids.map(
      (c) => new Promise((r) => (c.exitCode !== null || c.signalCode !== null ? r(0) : c.once('close', r))),
    ),
  );
  for (const c of kids) c.kill('SIGTERM');
  await Promise.race([gone, sleep(graceMs)]);
  for (const c of kids) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
}

export function tail(text: string, max = 2000): string {
  return text.length <= max ? text : '…' + text.slice(text.length - max);
}

export function describeCommand(cmd: string, args: readonly string[]): string {
  return [cmd, ...args].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(' ');
}

export async function run(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  const started = performance.now();
  const spawnOpts: SpawnOptions = { env: opts.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] };
  if (opts.cwd !== undefined) spawnOpts.cwd = opts.cwd;
  const child = spawn(cmd, [...args], spawnOpts);
  active.add(child);
  const maxOut = opts.maxStdout ?? 16 * 1024 * 1024;
  const out: Buffer[] = [];
  let outLen = 0;
  let err = '';
  let timedOut = false;
  child.stdout?.on('data', (b: Buffer) => {
    if (outLen < maxOut) {
      out.push(b);
      outLen += b.length;
    }
  });
  child.stderr?.on('data', (b: Buffer) => {
    err += b.toString();
    if (err.length > 2 * STDERR_KEEP) err = err.slice(err.length - STDERR_KEEP);
  });
  child.stdin?.on('error', () => undefined);
  if (opts.input !== undefined) child.stdin?.end(opts.input);
  else child.stdin?.end();
  const timer =
    opts.timeoutMs !== undefined
      ? setTimeout(() => {
          timedOut = true;
          child.kill('SIGKILL');
        }, opts.timeoutMs)
      : undefined;
  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>(
    (resolve, reject) => {
      child.once('error', (e) => {
        active.delete(child);
        if (timer) clearTimeout(timer);
        reject(
          new StoreError(
            'E_IO',
            `cannot start ${cmd}: ${e.message}`,
            { cmd: describeCommand(cmd, args) },
            { cause: e },
          ),
        );
      });
      child.once('close', (c, s) => {
        active.delete(child);
        if (timer) clearTimeout(timer);
        resolve({ code: c, signal: s });
      });
    },
  );
  const result: RunResult = {
    code,
    signal,
    stdout: Buffer.concat(out).toString(),
    stderr: err.length > STDERR_KEEP ? err.slice(err.length - STDERR_KEEP) : err,
    ms: performance.now() - started,
    timedOut,
  };
  if (!opts.allowFail && (code !== 0 || timedOut)) {
    throw commandError(cmd, args, result);
  }
  return result;
}

export function commandError(cmd: string, args: readonly string[], r: RunResult): StoreError {
  const why = r.timedOut ? 'timed out' : r.signal ? `killed by ${r.signal}` : `exit code ${String(r.code)}`;
  return new StoreError(
    'E_IO',
    `${describeCommand(cmd, args).slice(0, 300)} failed (${why}): ${tail(r.stderr, 1500)}`,
    {
      cmd: cmd,
      code: r.code ?? undefined,
      signal: r.signal ?? undefined,
    },
  );
}

/** Absolute path of an executable on PATH (or the path itself if absolute and executable), else undefined. */
export async function which(name: string): Promise<string | undefined> {
  const candidates = name.includes('/')
    ? [name]
    : (process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
        .split(':')
        .concat(['/usr/sbin', '/sbin'])
        .map((d) => `${d}/${name}`);
  for (const c of candidates) {
    try {
      await access(c, constants.X_OK);
      return c;
    } catch {
      // next candidate
    }
  }
  return undefined;
}

/** Fail loudly (typed error naming the Debian package) when a tool is missing. */
export async function requireTools(tools: Record<string, string>): Promise<void> {
  const missing: string[] = [];
  for (const [tool, pkg] of Object.entries(tools)) {
    if ((await which(tool)) === undefined) missing.push(`${tool} (apt package ${pkg})`);
  }
  if (missing.length > 0) {
    throw new StoreError('E_NOT_FOUND', `missing tools: ${missing.join(', ')}`, { tools: missing.join(',') });
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

let quiet = false;
export function setQuiet(q: boolean): void {
  quiet = q;
}

/** Called before each line (a progress bar on the terminal clears its line so the two don't mix). */
let beforeSay: (() => void) | undefined;
export function setBeforeSay(fn: (() => void) | undefined): void {
  beforeSay = fn;
}

/** Progress lines on stderr with elapsed seconds since start (stdout stays clean for results). */
const t0 = performance.now();
export function say(msg: string): void {
  if (quiet) return;
  beforeSay?.();
  const s = ((performance.now() - t0) / 1000).toFixed(1).padStart(7);
  process.stderr.write(`[bench ${s}s] ${msg}\n`);
}
