import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { runChild, type ChildResult } from './fuse.js';
import { startNotifyListener } from './sd-notify-listener.js';

/** The real `stargz-store` serve process, started the way systemd starts it (Type=notify). */

/** node arguments that run the built CLI (bin/ -> dist/: `npm run build` first). */
export const BIN_CLI = [fileURLToPath(new URL('../../bin/stargz-store.js', import.meta.url))];

export type Exit = { code: number | null; signal: NodeJS.Signals | null };

export interface ServeCli {
  child: ChildProcess;
  /** Everything the process logged (stderr) so far. */
  stderr(): string;
  exited: Promise<Exit>;
  /** Resolves when the log (stderr) contains `text`; rejects if the process exits first. */
  logged(text: string): Promise<void>;
  /** SIGTERM (if still running) and the exit. */
  stop(): Promise<Exit>;
}

export interface ServeCliOptions {
  /** node arguments that run the CLI: `TS_CLI` (sources) or `BIN_CLI` (dist/). */
  cli: readonly string[];
  config: string;
  root: string;
  addr: string;
  mountpoint: string;
  /** Where the sd_notify listener binds for this process. */
  notifySocket: string;
  /** The process environment (NOTIFY_SOCKET is set on top). Default process.env. */
  env?: NodeJS.ProcessEnv;
  /** Called with the process as soon as it is spawned (before READY=1), e.g. to clean it up later. */
  onSpawn?: (p: ServeCli) => void;
}

/**
 * `stargz-store --config --root --addr <mountpoint>`; resolves once it sent READY=1 (the mount and
 * the control socket answer). Rejects with its log if it exits first.
 */
export async function startServeCli(o: ServeCliOptions): Promise<ServeCli> {
  const listener = await startNotifyListener(o.notifySocket);
  try {
    const child = spawn(process.execPath, [...o.cli, ...serveArgs(o), o.mountpoint], {
      env: { ...(o.env ?? process.env), NOTIFY_SOCKET: listener.socket },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    const waiters: Array<{ text: string; resolve: () => void }> = [];
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      for (const w of waiters.splice(0)) {
        if (err.includes(w.text)) w.resolve();
        else waiters.push(w);
      }
    });
    const exited = new Promise<Exit>((r) => child.once('exit', (code, signal) => r({ code, signal })));
    const died = (what: string) =>
      exited.then((e) => Promise.reject(new Error(`store exited${what}: ${JSON.stringify(e)}\n${err}`)));
    const p: ServeCli = {
      child,
      stderr: () => err,
      exited,
      logged: (text) =>
        err.includes(text)
          ? Promise.resolve()
          : Promise.race([new Promise<void>((resolve) => waiters.push({ text, resolve })), died('')]),
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM'); // our child
        return await exited;
      },
    };
    o.onSpawn?.(p);
    try {
      await Promise.race([listener.waitFor('READY=1', 60_000), died(' before READY=1')]);
    } catch (e) {
      // no READY=1 in time: don't leave our child serving behind the failed test
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
      throw e;
    }
    return p;
  } finally {
    await listener.close();
  }
}

/** `--config <config> --root <root> --addr <addr>`: where a serve process reads and keeps its state. */
export function serveArgs(o: { config: string; root: string; addr: string }): string[] {
  return ['--config', o.config, '--root', o.root, '--addr', o.addr];
}

/** A one-shot `stargz-store <args>` (status, doctor, ...), run to its end. */
export function runCli(cli: readonly string[], args: string[], stdin = ''): Promise<ChildResult> {
  return runChild(process.execPath, [...cli, ...args], stdin);
}

/** The arguments of `stargz-store doctor --json` against a store's mount, socket, root and files. */
export function doctorArgs(o: {
  mountpoint: string;
  addr: string;
  root: string;
  config: string;
  storageConf: string;
  ref?: string;
}): string[] {
  return [
    'doctor',
    '--json',
    '--mountpoint',
    o.mountpoint,
    '--addr',
    o.addr,
    '--root',
    o.root,
    '--config',
    o.config,
    '--storage-conf',
    o.storageConf,
    ...(o.ref !== undefined ? ['--ref', o.ref] : []),
  ];
}
