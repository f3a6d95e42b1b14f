import { open, readFile, unlink } from 'node:fs/promises';
import { StoreError } from '../util/errors.js';

/**
 * One store per state root and per control socket: a lock file holding "<pid> <start time>" of its
 * owner, created with O_EXCL. A lock whose owner is gone (no such process, or the PID was reused by
 * a process that started at another time, as after a reboot) is stale and taken over, so a crash
 * never blocks the next start (systemd Restart=always).
 *
 * Two stores starting at the same instant on the same stale lock could both take it over (unlink +
 * create is not atomic); a live owner is always refused, which is the case that matters.
 */
export interface InstanceLock {
  readonly path: string;
  release(): Promise<void>;
}

export interface LockOwner {
  pid: number;
  startTime: string;
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or undefined if not running. */
export async function processStartTime(pid: number): Promise<string | undefined> {
  let stat: string;
  try {
    stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // comm (field 2) may hold spaces and parentheses: count fields after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return rest[19]; // fields 3.. -> index 0 is field 3, so field 22 is index 19
}

export function parseLockFile(text: string): LockOwner | undefined {
  const m = /^(\d+) (\d+)\n?$/.exec(text);
  return m ? { pid: Number(m[1]), startTime: m[2]! } : undefined;
}

/** The lock's owner if it is a running process (not this one), else undefined. */
export async function liveOwner(path: string): Promise<LockOwner | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch {
    return undefined;
  }
  const owner = parseLockFile(text);
  if (!owner || owner.pid === process.pid) return undefined;
  return (await processStartTime(owner.pid)) === owner.startTime ? owner : undefined;
}

/**
 * Takes the lock at `path` for this process. `what` names the guarded resource in the refusal:
 * "another stargz-store (pid 1234) is running on root /var/lib/stargz-store (lock ...)".
 */
export async function acquireInstanceLock(path: string, what: string): Promise<InstanceLock> {
  const self = await processStartTime(process.pid);
  if (self === undefined) throw new StoreError('E_IO', 'cannot read /proc/self/stat for the instance lock');
  const content = `${process.pid} ${self}\n`;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fh = await open(path, 'wx', 0o600);
      try {
        await fh.writeFile(content);
      } finally {
        await fh.close();
      }
      return {
        path,
        release: async () => {
          // Only our own lock: never remove one another store took over.
          const now = await readFile(path, 'utf8').catch(() => undefined);
          if (now === content) await unlink(path).catch(() => undefined);
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new StoreError('E_IO', `cannot create lock ${path}: ${(err as Error).message}`, { path });
      }
    }
    const owner = await liveOwner(path);
    if (owner) {
      throw new StoreError(
        'E_INVALID_ARGUMENT',
        `another stargz-store (pid ${owner.pid}) is running on ${what}; stop it first (lock ${path})`,
        { path, pid: owner.pid },
      );
    }
    await unlink(path).catch(() => undefined); // stale: its owner is gone
  }
  throw new StoreError('E_IO', `cannot take lock ${path}: it keeps reappearing`, { path });
}
