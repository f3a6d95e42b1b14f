import { spawn } from 'node:child_process';
import { access, constants } from 'node:fs/promises';
import { StoreError } from './errors.js';

/**
 * sd_notify(3) without native code. Node has no AF_UNIX datagram sockets, so one short-lived python3
 * child sends the datagram. Notifications happen a handful of times per process lifetime (READY,
 * STOPPING), so the spawn cost does not matter; the event loop never blocks on it.
 *
 * systemd only accepts messages from the unit's main PID unless NotifyAccess=all. As root we attach
 * SCM_CREDENTIALS naming OUR pid (the kernel allows that with CAP_SYS_ADMIN), so the default
 * NotifyAccess=main works too; without the privilege the plain datagram is sent and the unit needs
 * NotifyAccess=all (the shipped unit sets it). Without python3, `systemd-notify --no-block --pid=`
 * (present wherever systemd is) is used instead.
 */
const SENDER = `
import os, socket, struct, sys
addr, msg, pid = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
if addr.startswith('@'):
    addr = '\\0' + addr[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
s.connect(addr)
try:
    creds = struct.pack('3i', pid, os.getuid(), os.getgid())
    s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])
except OSError as e:
    # EPERM/ESRCH/EINVAL: not allowed to vouch for that pid; plain datagram instead
    if e.errno not in (1, 3, 22):
        raise
    s.send(msg)
`;

const PYTHON_CANDIDATES = ['/usr/bin/python3', '/usr/local/bin/python3'];

export interface NotifyOptions {
  /** Defaults to $NOTIFY_SOCKET. */
  socket?: string;
  /** Pid the message is attributed to (default: this process). */
  pid?: number;
  /** Give up after this long (default 5 s). */
  timeoutMs?: number;
  /** python3 to run (default: /usr/bin/python3, /usr/local/bin/python3, then PATH). */
  python?: string;
}

let pythonPath: Promise<string> | undefined;

async function findPython(): Promise<string> {
  for (const p of PYTHON_CANDIDATES) {
    try {
      await access(p, constants.X_OK);
      return p;
    } catch {
      // try the next one
    }
  }
  return 'python3'; // resolved through PATH by spawn
}

/**
 * Sends `state` (e.g. "READY=1", "STOPPING=1", "STATUS=...") to the notify socket.
 * Returns false when no notify socket is configured (not under systemd); throws StoreError E_IO when
 * a configured socket cannot be reached.
 */
export async function sdNotify(state: string, opts: NotifyOptions = {}): Promise<boolean> {
  const socketPath = opts.socket ?? process.env.NOTIFY_SOCKET;
  if (socketPath === undefined || socketPath === '') return false;
  if (!socketPath.startsWith('/') && !socketPath.startsWith('@')) {
    throw new StoreError('E_INVALID_ARGUMENT', `NOTIFY_SOCKET must be an absolute path or @abstract`, {
      socket: socketPath,
    });
  }
  if (state.includes('\0')) throw new StoreError('E_INVALID_ARGUMENT', 'notify state contains NUL');
  pythonPath ??= findPython();
  const python = opts.python ?? (await pythonPath);
  const pid = opts.pid ?? process.pid;
  const timeoutMs = opts.timeoutMs ?? 5000;
  try {
    await runSender(
      python,
      ['-I', '-S', '-c', SENDER, socketPath, state, String(pid)],
      timeoutMs,
      state,
      socketPath,
    );
  } catch (err) {
    if ((err as { missing?: boolean }).missing !== true) throw err;
    // No python3: systemd's own tool, where systemd is installed. --no-block: do not wait for PID 1.
    await runSender(
      'systemd-notify',
      ['--no-block', `--pid=${pid}`, ...state.split('\n').filter((l) => l !== '')],
      timeoutMs,
      state,
      socketPath,
    );
  }
  return true;
}

function runSender(
  cmd: string,
  args: string[],
  timeoutMs: number,
  state: string,
  socketPath: string,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const child = spawn(cmd, args, {
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: timeoutMs,
      killSignal: 'SIGKILL',
      env: { ...process.env, NOTIFY_SOCKET: socketPath },
    });
    let stderr = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d: string) => {
      if (stderr.length < 4096) stderr += d;
    });
    child.on('error', (err: NodeJS.ErrnoException) => {
      const e = new StoreError(
        'E_IO',
        `sd_notify: cannot run ${cmd}: ${err.message}`,
        { socket: socketPath },
        { cause: err },
      );
      if (err.code === 'ENOENT') Object.assign(e, { missing: true });
      reject(e);
    });
    child.on('close', (code, signal) => {
      if (code === 0) {
        resolve();
        return;
      }
      const why = signal !== null ? `killed by ${signal}` : `exit ${String(code)}`;
      const last = stderr.trim().split('\n').pop() ?? '';
      reject(
        new StoreError('E_IO', `sd_notify ${state.split('\n')[0] ?? ''} failed (${why}): ${last}`, {
          socket: socketPath,
        }),
      );
    });
  });
}
