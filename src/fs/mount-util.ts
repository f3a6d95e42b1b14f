import { execFile } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { StoreError } from '../util/errors.js';

/** Options we need from libfuse2; fuse-native only knows a subset, so the adapter builds the string. */
export interface MountOptions {
  allowOther?: boolean;
  debug?: boolean;
  /** Kernel entry/attr cache lifetime in seconds (Go stargz-store: 1 s). */
  entryTimeoutSec?: number;
  attrTimeoutSec?: number;
  fsname?: string;
}

/**
 * The `-o` string handed to fuse_mount()/fuse_new(). Read-write on purpose (create/rmdir must reach
 * us), no default_permissions (the kernel must not check our 0400/0500 modes), use_ino for stable
 * inode numbers shared by hardlinks, kernel_cache because content is immutable (keep_cache on every
 * open), negative_timeout=0 so an ENOENT is never cached by the kernel.
 *
 * Sequential reads: with kernel_cache a re-read is served from the page cache, and attribute
 * revalidation (attr/entry timeouts) keeps the pages as long as size and mtime stay the same, which
 * they do (test/integration/fuse-page-cache.test.ts). No direct_io (it would bypass that cache).
 * No max_read: read requests are capped at 128 KiB anyway (libfuse2 cannot negotiate the kernel's
 * FUSE_MAX_PAGES, and max_readahead can only lower the kernel's 128 KiB offer), so the store reads
 * ahead itself (src/layer/read-ahead.ts).
 */
export function buildMountOptions(opts: MountOptions): string {
  const o: string[] = [];
  if (opts.debug) o.push('debug');
  if (opts.allowOther) o.push('allow_other');
  o.push('use_ino');
  o.push(`entry_timeout=${opts.entryTimeoutSec ?? 1}`);
  o.push(`attr_timeout=${opts.attrTimeoutSec ?? 1}`);
  o.push('negative_timeout=0');
  o.push('kernel_cache');
  o.push(`fsname=${opts.fsname ?? 'stargzstore'}`);
  for (const x of o) {
    // fuse_opt splits on ',' and treats '\\' specially: refuse rather than inject options
    if (/[,\\\s]/.test(x)) {
      throw new StoreError('E_INVALID_ARGUMENT', `invalid mount option ${JSON.stringify(x)}`);
    }
  }
  return '-o' + o.join(',');
}

function run(cmd: string, args: string[]): Promise<{ ok: boolean; stderr: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { timeout: 10_000 }, (err, _stdout, stderr) => {
      done({ ok: !err, stderr: String(stderr ?? '') + (err && !stderr ? err.message : '') });
    });
  });
}

/** Decode the octal escapes (\040 ...) /proc/self/mountinfo uses in paths. */
function unescapeMountPath(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/**
 * The file-system type (`fuse`, `fuse.stargzstore`, `overlay` ...) of the mount exactly at `path`
 * (the last one, when mounts are stacked), or undefined. Reads /proc/self/mountinfo: no stat, so a
 * dead FUSE mount is reported too.
 */
export async function mountType(path: string): Promise<string | undefined> {
  const abs = resolve(path);
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  let type: string | undefined;
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    // fields: id parent dev root mountpoint options [optional...] - fstype source superoptions
    const sep = f.indexOf('-', 6);
    if (f.length > 4 && unescapeMountPath(f[4]!) === abs) type = sep > 0 ? (f[sep + 1] ?? '') : '';
  }
  return type;
}

/** Is something mounted exactly at `path`? */
export async function isMountpoint(path: string): Promise<boolean> {
  return (await mountType(path)) !== undefined;
}

/**
 * Unmount a FUSE mount: `fusermount -u` first (clean), then a lazy detach when busy (containers may
 * still hold overlay mounts on top of it). "Not mounted" counts as success.
 */
export async function unmountPath(path: string): Promise<void> {
  const abs = resolve(path);
  if (!(await isMountpoint(abs))) return;
  const attempts: Array<[string, string[]]> = [
    ['fusermount', ['-u', abs]],
    ['fusermount', ['-uz', abs]],
    ['umount', ['-l', abs]],
  ];
  let last = '';
  for (const [cmd, args] of attempts) {
    const r = await run(cmd, args);
    if (r.ok || !(await isMountpoint(abs))) return;
    last = `${cmd} ${args.join(' ')}: ${r.stderr.trim()}`;
  }
  throw new StoreError('E_IO', `cannot unmount ${abs}: ${last}`, { path: abs });
}

export type StaleMountResult = 'none' | 'cleared' | 'live';

/**
 * Detect and clear a dead FUSE mount (daemon gone: stat fails with ENOTCONN/ECONNABORTED) left at
 * `path` by a crashed store. A live mount is left alone and reported as 'live'; the caller decides.
 */
export async function clearStaleMount(path: string): Promise<StaleMountResult> {
  const abs = resolve(path);
  let dead = false;
  const probe = async (p: string, missingOk: boolean): Promise<boolean> => {
    try {
      await stat(p);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTCONN' || code === 'ECONNABORTED') return true;
      if (!missingOk && code === 'ENOENT') return false;
      if (!missingOk)
        throw new StoreError('E_IO', `cannot stat mountpoint ${abs}: ${String(code)}`, { path: abs });
    }
    return false;
  };
  try {
    await stat(abs);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'none';
  }
  dead = await probe(abs, false);
  if (!dead) {
    if (!(await isMountpoint(abs))) return 'none';
    // The kernel may still answer stat of the root from its attribute cache: a lookup of a child
    // always reaches the daemon (we never cache negative entries), so it tells dead from alive.
    // (a fresh name each time: a previous answer may sit in the dentry cache)
    dead = await probe(
      join(abs, `.stargz-store-liveness-${process.pid}-${Date.now()}-${Math.random()}`),
      true,
    );
    if (!dead) return 'live';
  }
  const r = await run('fusermount', ['-uz', abs]);
  if (!r.ok && (await isMountpoint(abs))) {
    const r2 = await run('umount', ['-l', abs]);
    if (!r2.ok && (await isMountpoint(abs))) {
      throw new StoreError('E_IO', `cannot clear stale mount at ${abs}: ${r2.stderr.trim()}`, { path: abs });
    }
  }
  return 'cleared';
}
