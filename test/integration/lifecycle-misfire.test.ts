import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startNotifyListener, type NotifyListener } from '../helpers/sd-notify-listener.js';

/**
 * The CLI cannot misfire: a mistyped command mounts nothing; a second store on the same root or the
 * same control socket is refused (naming the first one's PID) while the first keeps serving; start-up
 * errors are one line; a stop signal during start-up or a second one during shutdown still ends with
 * the mount gone.
 */

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(REPO, 'bin/stargz-store.js');

interface Proc {
  child: ChildProcess;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves when stderr has a line containing `text`. */
  line: (text: string) => Promise<void>;
}

function spawnCli(args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Proc {
  const child = spawn(process.execPath, [CLI, ...args], {
    cwd: opts.cwd ?? REPO,
    env: opts.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  const waiters: { text: string; resolve: () => void }[] = [];
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
    for (const w of waiters.splice(0)) {
      if (err.includes(w.text)) w.resolve();
      else waiters.push(w);
    }
  });
  child.stdout!.resume();
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    stderr: () => err,
    exited,
    line: (text) =>
      err.includes(text)
        ? Promise.resolve()
        : new Promise<void>((resolve, reject) => {
            waiters.push({ text, resolve });
            void exited.then((e) =>
              reject(new Error(`exited (${JSON.stringify(e)}) before '${text}':\n${err}`)),
            );
          }),
  };
}

async function fuseMounted(path: string): Promise<boolean> {
  const text = await readFile('/proc/mounts', 'utf8');
  return text.split('\n').some((l) => {
    const f = l.split(' ');
    return f[1] === path && (f[2] ?? '').startsWith('fuse');
  });
}

function forceUnmount(path: string): Promise<void> {
  return new Promise((resolve) => execFile('fusermount', ['-uz', path], () => resolve()));
}

function lines(text: string): string[] {
  return text.split('\n').filter((l) => l.trim() !== '');
}

describe('a CLI that cannot misfire', () => {
  let dir: string;
  let config: string;
  let listener: NotifyListener;
  const procs: Proc[] = [];
  const mounts: string[] = [];

  beforeAll(() => {
    if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
  });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'misfire-'));
    config = join(dir, 'config.toml');
    await writeFile(
      config,
      '[registry]\nregistries_conf = ""\n[deadlines]\nlookup_sec = 5\nread_sec = 5\nfuse_sec = 10\n',
    );
    listener = await startNotifyListener(join(dir, 'notify.sock'));
  });

  afterEach(async () => {
    for (const p of procs.splice(0)) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill('SIGKILL');
        await p.exited;
      }
    }
    for (const m of mounts.splice(0)) if (await fuseMounted(m)) await forceUnmount(m);
    await listener.close();
    await rm(dir, { recursive: true, force: true });
  });

  function start(args: string[], env: NodeJS.ProcessEnv = {}): Proc {
    const p = spawnCli(['--config', config, ...args], {
      env: { ...process.env, NOTIFY_SOCKET: listener.socket, ...env },
    });
    procs.push(p);
    return p;
  }

  it('a mistyped command is refused with a suggestion and mounts nothing', async () => {
    const p = spawnCli(['stauts', '--root', join(dir, 'root'), '--addr', join(dir, 's.sock')], { cwd: dir });
    const exit = await p.exited;
    expect(exit.code).toBe(1);
    expect(lines(p.stderr())).toEqual([
      "stargz-store: E_INVALID_ARGUMENT: unknown command 'stauts' (did you mean 'status'?)",
    ]);
    // Nothing was created: no mountpoint, no root, no socket.
    expect((await readdir(dir)).sort()).toEqual(['config.toml', 'notify.sock']);
    expect(await fuseMounted(join(dir, 'stauts'))).toBe(false);

    const other = spawnCli(['mnt'], { cwd: dir });
    expect((await other.exited).code).toBe(1);
    expect(lines(other.stderr())).toEqual([
      "stargz-store: E_INVALID_ARGUMENT: unknown command 'mnt' (a mountpoint must be an absolute path or an existing directory)",
    ]);
  });

  it('a relative mountpoint that is an existing directory is still accepted (the Go form)', async () => {
    await mkdir(join(dir, 'rel'));
    const p = spawnCli(
      ['--config', config, '--root', join(dir, 'root'), '--addr', join(dir, 's.sock'), 'rel'],
      {
        cwd: dir,
        env: { ...process.env, NOTIFY_SOCKET: listener.socket },
      },
    );
    procs.push(p);
    mounts.push(join(dir, 'rel'));
    await listener.waitFor('READY=1', 60_000);
    expect(await fuseMounted(join(dir, 'rel'))).toBe(true);
    p.child.kill('SIGTERM');
    expect((await p.exited).code).toBe(0);
    expect(await fuseMounted(join(dir, 'rel'))).toBe(false);
  });

  it('a second store on the same root or socket is refused, naming the PID; the first keeps serving', async () => {
    const root = join(dir, 'root');
    const sock = join(dir, 's.sock');
    const mnt = join(dir, 'mnt');
    mounts.push(mnt, join(dir, 'mnt2'), join(dir, 'mnt3'));
    const first = start(['--root', root, '--addr', sock, mnt]);
    await listener.waitFor('READY=1', 60_000);
    const pid = first.child.pid!;

    const sameRoot = start(['--root', root, '--addr', join(dir, 's2.sock'), join(dir, 'mnt2')]);
    expect((await sameRoot.exited).code).toBe(1);
    expect(lines(sameRoot.stderr())).toEqual([
      `stargz-store: E_INVALID_ARGUMENT: another stargz-store (pid ${pid}) is running on root ${root}; stop it first (lock ${root}/stargz-store.lock)`,
    ]);

    const sameSock = start(['--root', join(dir, 'root2'), '--addr', sock, join(dir, 'mnt3')]);
    expect((await sameSock.exited).code).toBe(1);
    expect(lines(sameSock.stderr())).toEqual([
      `stargz-store: E_INVALID_ARGUMENT: another stargz-store (pid ${pid}) is running on control socket ${sock}; stop it first (lock ${sock}.lock)`,
    ]);
    expect(await fuseMounted(join(dir, 'mnt2'))).toBe(false);
    expect(await fuseMounted(join(dir, 'mnt3'))).toBe(false);

    // The first one still serves: its mount answers, its socket is its own.
    expect(await fuseMounted(mnt)).toBe(true);
    expect((await stat(mnt)).isDirectory()).toBe(true);
    const status = await new Promise<string>((resolve) => {
      const c = spawn(process.execPath, [CLI, 'status', '--addr', sock, '--json']);
      let o = '';
      c.stdout.on('data', (d: Buffer) => (o += d.toString()));
      c.on('close', () => resolve(o));
    });
    expect((JSON.parse(status) as { pid: number }).pid).toBe(pid);
    expect(existsSync(sock)).toBe(true);

    first.child.kill('SIGTERM');
    expect((await first.exited).code).toBe(0);
    expect(await fuseMounted(mnt)).toBe(false);
    expect(existsSync(join(root, 'stargz-store.lock'))).toBe(false);
    expect(existsSync(`${sock}.lock`)).toBe(false);
  });

  it('a lock left by a killed store does not block the next start', async () => {
    const root = join(dir, 'root');
    const mnt = join(dir, 'mnt');
    mounts.push(mnt);
    await mkdir(root, { recursive: true });
    // A PID that is not running (or runs since another time): stale.
    await writeFile(join(root, 'stargz-store.lock'), '999999999 1\n');
    const s = start(['--root', root, '--addr', join(dir, 's.sock'), mnt]);
    await listener.waitFor('READY=1', 60_000);
    expect((await readFile(join(root, 'stargz-store.lock'), 'utf8')).split(' ')[0]).toBe(String(s.child.pid));
    s.child.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
  });

  it('start-up errors are one line and exit 1: mountpoint is a regular file, bad --log-format', async () => {
    const file = join(dir, 'file');
    await writeFile(file, 'x');
    const p = start(['--root', join(dir, 'root'), '--addr', join(dir, 's.sock'), file]);
    expect((await p.exited).code).toBe(1);
    expect(lines(p.stderr())).toEqual([
      `stargz-store: E_INVALID_ARGUMENT: mountpoint ${file} is a regular file, not a directory`,
    ]);
    expect(await readFile(file, 'utf8')).toBe('x');

    const f = start(['--log-format', 'yaml', '--root', join(dir, 'root'), join(dir, 'mnt')]);
    expect((await f.exited).code).toBe(1);
    expect(lines(f.stderr())).toEqual([
      "stargz-store: E_INVALID_ARGUMENT: --log-format must be json, text or auto, got 'yaml'",
    ]);
  });

  it('--log-format text prints readable lines with level names', async () => {
    const mnt = join(dir, 'mnt');
    mounts.push(mnt);
    const s = start([
      '--log-format',
      'text',
      '--root',
      join(dir, 'root'),
      '--addr',
      join(dir, 's.sock'),
      mnt,
    ]);
    await listener.waitFor('READY=1', 60_000);
    await s.line('stargz-store ready');
    s.child.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
    const ready = lines(s.stderr()).find((l) => l.includes('stargz-store ready'))!;
    expect(ready).toMatch(/INFO/);
    expect(() => JSON.parse(ready) as unknown).toThrow();
  });

  it('SIGTERM at any point of start-up ends with no mount', async () => {
    const mnt = join(dir, 'mnt');
    mounts.push(mnt);
    // Each start-up milestone in turn: the signal lands before, during and after the mount.
    for (const milestone of [
      'stargz-store starting',
      'chunk cache index ready',
      'control socket listening',
    ]) {
      const s = start([
        '--log-level',
        'debug',
        '--root',
        join(dir, 'root'),
        '--addr',
        join(dir, 's.sock'),
        mnt,
      ]);
      await s.line(milestone);
      s.child.kill('SIGTERM');
      const exit = await s.exited;
      expect(exit.code, `${milestone}\n${s.stderr()}`).not.toBeNull();
      expect(await fuseMounted(mnt), milestone).toBe(false);
    }
  });

  it('a second SIGTERM while stopping still leaves no mount', async () => {
    const mnt = join(dir, 'mnt');
    mounts.push(mnt);
    const s = start(['--root', join(dir, 'root'), '--addr', join(dir, 's.sock'), mnt]);
    await listener.waitFor('READY=1', 60_000);
    s.child.kill('SIGTERM');
    s.child.kill('SIGTERM');
    await s.exited;
    expect(await fuseMounted(mnt)).toBe(false);
  });
});
