import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { waitForMountLive } from '../../src/cli/serve-command.js';
import { isStoreError } from '../../src/util/errors.js';
import { startNotifyListener, type NotifyListener } from '../helpers/sd-notify-listener.js';
import { runChild } from '../helpers/fuse.js';
import { BIN_CLI, runCli } from '../helpers/serve-cli.js';

/**
 * The real CLI (`node bin/stargz-store.js`) started as systemd would start it: NOTIFY_SOCKET points at
 * our own datagram listener. Checks READY=1 only once the FUSE mount answers, clean unmount on SIGTERM
 * and SIGINT, recovery from a stale mount left by SIGKILL, and fatal config errors naming the key.
 */

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(REPO, 'bin/stargz-store.js');
const HELPER = join(REPO, 'bin/stargz-store-helper.js');

interface StoreProc {
  child: ChildProcess;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function startStore(args: string[], env: NodeJS.ProcessEnv): StoreProc {
  const child = spawn(process.execPath, [CLI, ...args], {
    cwd: REPO,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  child.stdout!.resume();
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, stderr: () => err, exited };
}

/** Is `path` a FUSE mount in /proc/mounts (read by the test process, independent of the store)? */
async function fuseMounted(path: string): Promise<boolean> {
  const text = await readFile('/proc/mounts', 'utf8');
  return text.split('\n').some((l) => {
    const f = l.split(' ');
    return f[1] === path && (f[2] ?? '').startsWith('fuse');
  });
}

async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, rej) => {
        t = setTimeout(() => rej(new Error(`${what}: no result within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(t);
  }
}

function statErrno(path: string): Promise<string | undefined> {
  return stat(path).then(
    () => undefined,
    (e: NodeJS.ErrnoException) => e.code,
  );
}

function forceUnmount(path: string): Promise<void> {
  return new Promise((resolve) => execFile('fusermount', ['-uz', path], () => resolve()));
}

describe('stargz-store serve lifecycle (real CLI, real FUSE, own notify socket)', () => {
  let dir: string;
  let mnt: string;
  let root: string;
  let sock: string;
  let config: string;
  let listener: NotifyListener;
  let env: NodeJS.ProcessEnv;
  const started: StoreProc[] = [];

  beforeAll(() => {
    if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
  });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lc-'));
    mnt = join(dir, 'mnt');
    root = join(dir, 'root');
    sock = join(dir, 's.sock');
    config = join(dir, 'config.toml');
    // Isolated from the machine's registries.conf; short deadlines keep failures quick.
    await writeFile(
      config,
      '[registry]\nregistries_conf = ""\n[deadlines]\nlookup_sec = 5\nread_sec = 5\nfuse_sec = 10\n',
    );
    listener = await startNotifyListener(join(dir, 'notify.sock'));
    env = { ...process.env, NOTIFY_SOCKET: listener.socket };
  });

  afterEach(async () => {
    for (const p of started.splice(0)) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill('SIGKILL');
        await p.exited;
      }
    }
    if (await fuseMounted(mnt)) await forceUnmount(mnt);
    await listener.close();
    await rm(dir, { recursive: true, force: true });
  });

  function start(args: string[]): StoreProc {
    const p = startStore(args, env);
    started.push(p);
    return p;
  }

  it('SIGTERM: READY=1 only once the mount answers; status and helper work; STOPPING=1, unmount, exit 0', async () => {
    const s = start(['--config', config, '--root', root, '--addr', sock, mnt]);
    const ready = await withTimeout(
      Promise.race([
        listener.waitFor('READY=1', 60_000),
        s.exited.then((e) =>
          Promise.reject(new Error(`store exited early: ${JSON.stringify(e)}\n${s.stderr()}`)),
        ),
      ]),
      61_000,
      'READY=1',
    );
    // At READY the mount is in /proc/mounts and answers a stat from another process (this one).
    expect(await fuseMounted(mnt)).toBe(true);
    expect(await statErrno(mnt)).toBeUndefined();
    expect(listener.messages[0]!.msg).toBe('READY=1'); // nothing before it
    expect(ready.pid).toBe(s.child.pid); // attributed to the main pid (NotifyAccess=main works)

    // Control socket: root-only, and the status command reads it.
    expect((await stat(sock)).mode & 0o777).toBe(0o600);
    const st = await runCli(BIN_CLI, ['status', '--addr', sock, '--json']);
    expect(st.stderr, 'is `status` registered in src/cli/main.ts (registerStatusCommand)?').toBe('');
    expect(st.code).toBe(0);
    const status = JSON.parse(st.stdout) as { pid: number; mountpoint: string; layers: unknown[] };
    expect(status.pid).toBe(s.child.pid);
    expect(status.mountpoint).toBe(mnt);
    expect(Array.isArray(status.layers)).toBe(true);

    // The helper binary hands credentials to the running store; the secret never reaches the logs.
    const h = await runChild(
      process.execPath,
      [HELPER, sock],
      '{"127.0.0.1:5999/lc/app:v1":{"username":"lcuser","password":"LC-SECRET-PW"}}',
    );
    expect(h.stderr).toBe('');
    expect(h.code).toBe(0);

    s.child.kill('SIGTERM');
    const exit = await withTimeout(s.exited, 30_000, 'exit after SIGTERM');
    expect(exit).toEqual({ code: 0, signal: null });
    await listener.waitFor('STOPPING=1', 5000);
    expect(await fuseMounted(mnt)).toBe(false);
    expect(existsSync(sock)).toBe(false);
    const log = s.stderr();
    expect(log).not.toContain('LC-SECRET-PW');
    // pino JSON lines on stderr, nothing else.
    const lines = log.split('\n').filter((l) => l.trim() !== '');
    expect(lines.length).toBeGreaterThan(0);
    for (const l of lines) expect(() => JSON.parse(l) as unknown, l).not.toThrow();
    expect(log).toContain('127.0.0.1:5999/lc/app:v1'); // the ref is logged when credentials arrive
  });

  it('SIGINT with Go-style single-dash flags: clean unmount, exit 0', async () => {
    const s = start([`-config=${config}`, `-root=${root}`, '-addr', sock, '-log-level=debug', mnt]);
    await listener.waitFor('READY=1', 60_000);
    expect(await fuseMounted(mnt)).toBe(true);
    s.child.kill('SIGINT');
    expect(await withTimeout(s.exited, 30_000, 'exit after SIGINT')).toEqual({ code: 0, signal: null });
    await listener.waitFor('STOPPING=1', 5000);
    expect(await fuseMounted(mnt)).toBe(false);
    expect(s.stderr()).toContain('"level":"debug"'); // -log-level=debug took effect (level names, not numbers)
  });

  it('the readiness gate waits for a mount that answers, not just one that is listed', async () => {
    const s = start(['--config', config, '--root', root, '--addr', sock, mnt]);
    await listener.waitFor('READY=1', 60_000);
    // A directory that is not a mount never becomes ready.
    const plain = join(dir, 'plain');
    await mkdir(plain);
    const e1 = await waitForMountLive(plain, 300).catch((e: unknown) => e);
    expect(isStoreError(e1, 'E_DEADLINE')).toBe(true);
    // A listed FUSE mount whose daemon does not answer (stopped) is not ready either.
    s.child.kill('SIGSTOP');
    try {
      await new Promise((r) => setTimeout(r, 1500)); // let the kernel's 1 s attribute cache expire
      expect(await fuseMounted(mnt)).toBe(true);
      const e2 = await waitForMountLive(mnt, 1500).catch((e: unknown) => e);
      expect(isStoreError(e2, 'E_DEADLINE')).toBe(true);
    } finally {
      s.child.kill('SIGCONT');
    }
    await waitForMountLive(mnt, 10_000);
    s.child.kill('SIGTERM');
    expect((await withTimeout(s.exited, 30_000, 'exit')).code).toBe(0);
  });

  it('a stale mount left by a SIGKILLed store is cleared by the next start', async () => {
    const first = start(['--config', config, '--root', root, '--addr', sock, mnt]);
    await listener.waitFor('READY=1', 60_000);
    first.child.kill('SIGKILL');
    await first.exited;
    // The kernel keeps the mount; the daemon is gone.
    expect(await fuseMounted(mnt)).toBe(true);
    // ENOTCONN or ECONNABORTED depending on how the kernel saw /dev/fuse close.
    expect(['ENOTCONN', 'ECONNABORTED']).toContain(await statErrno(mnt));
    listener.messages.length = 0;

    const second = start(['--config', config, '--root', root, '--addr', sock, mnt]);
    await withTimeout(
      Promise.race([
        listener.waitFor('READY=1', 60_000),
        second.exited.then((e) =>
          Promise.reject(new Error(`second store exited: ${JSON.stringify(e)}\n${second.stderr()}`)),
        ),
      ]),
      61_000,
      'READY=1 after stale mount',
    );
    expect(await statErrno(mnt)).toBeUndefined();
    expect(second.stderr()).toMatch(/stale/);
    second.child.kill('SIGTERM');
    expect(await withTimeout(second.exited, 30_000, 'exit')).toEqual({ code: 0, signal: null });
    expect(await fuseMounted(mnt)).toBe(false);
  });

  it('a bad config value stops start-up with a message naming the key; nothing is mounted', async () => {
    await writeFile(config, '[blob]\nchunk_size = -3\n');
    const s = start(['--config', config, '--root', root, '--addr', sock, mnt]);
    const exit = await withTimeout(s.exited, 30_000, 'exit on bad config');
    expect(exit.code).not.toBe(0);
    expect(s.stderr()).toContain('config key [blob] chunk_size: must be a positive integer, got -3');
    expect(await fuseMounted(mnt)).toBe(false);
    expect(existsSync(sock)).toBe(false);
    expect(listener.messages).toEqual([]);

    const missing = start(['--config', join(dir, 'nope.toml'), '--root', root, '--addr', sock, mnt]);
    expect((await withTimeout(missing.exited, 30_000, 'exit on missing config')).code).not.toBe(0);
    expect(missing.stderr()).toContain(`config file ${join(dir, 'nope.toml')}: not found`);
  });
});
