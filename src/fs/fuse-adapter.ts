import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import type { Logger } from '../util/logger.js';
import { silentLogger } from '../util/logger.js';
import { StoreError } from '../util/errors.js';
import { withDeadline } from '../util/abort.js';
import { timeFuseOp } from '../util/metrics.js';
import { Errno, FsError, errnoFor } from './errno.js';
import { buildMountOptions, unmountPath, type MountOptions } from './mount-util.js';
import { ROOT_DIR_ATTR, type Attr, type FsOp, type OpenFile, type VirtualFs } from './vfs.js';

/* fuse-native ships no types: describe the small surface we use. */
type Cb = (...args: unknown[]) => void;
/** Any op handler: fuse-native calls each with its own argument list. */
type Handler = (...args: never[]) => void;
type Signal = (res: number, ...rest: unknown[]) => void;
interface FuseInstance {
  mount(cb: (err: Error | null) => void): void;
  unmount(cb: (err: Error | null) => void): void;
}
interface FuseStatic {
  new (mnt: string, ops: Record<string, Handler>, opts: Record<string, unknown>): FuseInstance;
  unmount(mnt: string, cb: (err: Error | null) => void): void;
}

const require = createRequire(import.meta.url);
const FuseBase = require('fuse-native') as FuseStatic;

// fuse-native unmounts with a lazy `fusermount -uz` and skips its native clean-up when that fails
// (e.g. already unmounted), leaving an async handle that keeps the process alive. Route it through
// our helper: clean unmount first, lazy only when busy, "not mounted" is success.
FuseBase.unmount = (mnt, cb) => {
  unmountPath(mnt).then(
    () => cb(null),
    (err: unknown) => cb(err instanceof Error ? err : new Error(String(err))),
  );
};

function toStat(a: Attr): Record<string, number> {
  const size = a.size;
  return {
    mode: a.mode,
    uid: a.uid,
    gid: a.gid,
    size,
    dev: 0,
    nlink: a.nlink > 0 ? a.nlink : 1,
    ino: a.ino,
    rdev: a.rdev,
    blksize: 4096,
    blocks: Math.ceil(size / 4096) * 8,
    // fuse-native takes milliseconds (unsigned)
    atime: Math.max(0, a.atime ?? a.mtime) * 1000,
    mtime: Math.max(0, a.mtime) * 1000,
    ctime: Math.max(0, a.ctime ?? a.mtime) * 1000,
  };
}

export interface FuseMountOptions extends MountOptions {
  logger?: Logger;
}

export interface MountedFs {
  readonly mountpoint: string;
  unmount(): Promise<void>;
}

/**
 * Mount `vfs` at `mountpoint` with fuse-native (libfuse2 high-level API, requests answered on the JS
 * main thread). Every operation runs under the deadline the VirtualFs names and is answered with an
 * errno when it expires, so a kernel request never waits forever.
 */
export async function mountVirtualFs(
  mountpoint: string,
  vfs: VirtualFs,
  opts: FuseMountOptions = {},
): Promise<MountedFs> {
  const log = opts.logger ?? silentLogger;
  const mnt = resolve(mountpoint);
  const mountOpts = buildMountOptions(opts);
  const files = new Map<number, OpenFile>();
  let nextFd = 1;
  const allocFd = (f: OpenFile): number => {
    // fuse-native carries fh as uint32 and treats 0 as "no handle"
    while (files.has(nextFd) || nextFd === 0) nextFd = (nextFd + 1) >>> 0;
    const fd = nextFd;
    nextFd = (nextFd + 1) >>> 0;
    files.set(fd, f);
    return fd;
  };

  /** Run one operation under its deadline; `answer` is called exactly once, never after expiry. */
  function serve<T>(
    op: FsOp,
    path: string,
    work: (signal: AbortSignal) => Promise<T>,
    answer: (v: T) => void,
    fail: (errno: number) => void,
  ): void {
    let ms: number;
    try {
      ms = vfs.deadlineMs(op, path);
    } catch {
      ms = 5000;
    }
    timeFuseOp(op, withDeadline(ms, work, { context: { op, path } })).then(answer, (err: unknown) => {
      const name = errnoFor(err);
      if (err instanceof StoreError && err.code === 'E_DEADLINE') {
        log.warn({ op, path, ms }, 'fuse operation hit its deadline');
      } else if (name === 'EIO') {
        log.warn({ op, path, err }, 'fuse operation failed');
      } else {
        log.debug({ op, path, errno: name }, 'fuse operation answered with an error');
      }
      fail(-Errno[name]);
    });
  }

  const erofs = (cb: Cb) => process.nextTick(cb, -Errno.EROFS);

  const ops: Record<string, Handler> = {
    init: (cb: Cb) => cb(0),
    getattr: (path: string, cb: Cb) => {
      serve(
        'getattr',
        path,
        (signal) => vfs.getattr(path, { signal }),
        (a) => cb(0, toStat(a)),
        (e) => cb(e),
      );
    },
    access: (_path: string, _mode: number, cb: Cb) => {
      // F_OK/R_OK from faccessat (NEW c/storage existence probe): the node exists if LOOKUP succeeded
      process.nextTick(cb, 0);
    },
    readdir: (path: string, cb: Cb) => {
      serve(
        'readdir',
        path,
        (signal) => Promise.all([vfs.readdir(path, { signal }), vfs.getattr(path, { signal })]),
        ([entries, self]) => {
          // glibc's readdir skips d_ino == 0, so '.' and '..' need real numbers
          const names = ['.', '..'];
          const stats = [toStat(self), toStat(ROOT_DIR_ATTR)];
          for (const e of entries) {
            names.push(e.name);
            stats.push(toStat(e.attr));
          }
          cb(0, names, stats);
        },
        (e) => cb(e),
      );
    },
    readlink: (path: string, cb: Cb) => {
      serve(
        'readlink',
        path,
        (signal) => vfs.readlink(path, { signal }),
        (t) => cb(0, t),
        (e) => cb(e),
      );
    },
    open: (path: string, flags: number, cb: Cb) => {
      serve(
        'open',
        path,
        (signal) => vfs.open(path, flags, { signal }),
        (f) => cb(0, allocFd(f)),
        (e) => cb(e),
      );
    },
    create: (path: string, mode: number, cb: Cb) => {
      serve(
        'create',
        path,
        (signal) => vfs.create(path, mode, { signal }),
        (f) => cb(0, allocFd(f)),
        (e) => cb(e),
      );
    },
    read: (path: string, fd: number, buf: Buffer, len: number, pos: number, cb: Cb) => {
      const f = files.get(fd);
      if (!f) return process.nextTick(cb, -Errno.EBADF);
      serve(
        'read',
        path,
        // transient: the answer below copies the bytes within the turn they arrive in
        (signal) => f.read(pos, len, signal, true),
        (data) => {
          // only reached before the deadline: the kernel's buffer is still ours to fill
          const n = Math.min(len, data.length);
          data.copy(buf, 0, 0, n);
          cb(n);
        },
        (e) => cb(e),
      );
    },
    release: (_path: string, fd: number, cb: Cb) => {
      const f = files.get(fd);
      files.delete(fd);
      try {
        f?.release?.();
      } catch (err) {
        log.warn({ err }, 'release failed');
      }
      process.nextTick(cb, 0);
    },
    rmdir: (path: string, cb: Cb) => {
      serve(
        'rmdir',
        path,
        (signal) => vfs.rmdir(path, { signal }),
        () => cb(0),
        (e) => cb(e),
      );
    },
    statfs: (path: string, cb: Cb) => {
      serve(
        'statfs',
        path,
        (signal) => vfs.statfs(path, { signal }),
        (s) => cb(0, { ...s, fsid: 0, flag: 0 }),
        (e) => cb(e),
      );
    },
    // Everything that would modify the tree: read-only file system.
    write: (_p: string, _fd: number, _b: Buffer, _l: number, _pos: number, cb: Cb) => erofs(cb),
    mkdir: (_p: string, _m: number, cb: Cb) => erofs(cb),
    mknod: (_p: string, _m: number, _d: number, cb: Cb) => erofs(cb),
    unlink: (_p: string, cb: Cb) => erofs(cb),
    rename: (_p: string, _d: string, cb: Cb) => erofs(cb),
    link: (_p: string, _d: string, cb: Cb) => erofs(cb),
    symlink: (_p: string, _d: string, cb: Cb) => erofs(cb),
    chmod: (_p: string, _m: number, cb: Cb) => erofs(cb),
    chown: (_p: string, _u: number, _g: number, cb: Cb) => erofs(cb),
    truncate: (_p: string, _s: number, cb: Cb) => erofs(cb),
    ftruncate: (_p: string, _fd: number, _s: number, cb: Cb) => erofs(cb),
    utimens: (_p: string, _a: number, _m: number, cb: Cb) => erofs(cb),
    setxattr: (_p: string, _n: string, _v: Buffer, _pos: number, _f: number, cb: Cb) => erofs(cb),
    removexattr: (_p: string, _n: string, cb: Cb) => erofs(cb),
    // Present so fuse-native registers them; the real work happens in the overrides below.
    getxattr: (_p: string, _n: string, _pos: number, cb: Cb) => process.nextTick(cb, -Errno.ENODATA),
    listxattr: (_p: string, cb: Cb) => process.nextTick(cb, 0, []),
  };

  // fuse-native's own getxattr/listxattr glue gets the size protocol wrong (no ERANGE, +128 bytes
  // padding on size queries): answer the kernel directly with exact sizes.
  class StoreFuse extends FuseBase {
    _fuseOptions(): string {
      return mountOpts;
    }
    _op_getxattr(signal: Signal, path: string, name: string, valueBuf: Buffer): void {
      serve(
        'getxattr',
        path,
        (s) => vfs.getxattr(path, name, { signal: s }),
        (value) => {
          if (value === undefined) return signal(-Errno.ENODATA, valueBuf.buffer);
          if (valueBuf.length === 0) return signal(value.length, valueBuf.buffer);
          if (value.length > valueBuf.length) return signal(-Errno.ERANGE, valueBuf.buffer);
          value.copy(valueBuf);
          signal(value.length, valueBuf.buffer);
        },
        (e) => signal(e, valueBuf.buffer),
      );
    }
    _op_listxattr(signal: Signal, path: string, listBuf: Buffer): void {
      serve(
        'listxattr',
        path,
        (s) => vfs.listxattr(path, { signal: s }),
        (names) => {
          const bytes = Buffer.concat(names.map((n) => Buffer.from(n + '\0')));
          if (listBuf.length === 0) return signal(bytes.length, listBuf.buffer);
          if (bytes.length > listBuf.length) return signal(-Errno.ERANGE, listBuf.buffer);
          bytes.copy(listBuf);
          signal(bytes.length, listBuf.buffer);
        },
        (e) => signal(e, listBuf.buffer),
      );
    }
  }

  // timeout:false: our own per-operation deadlines answer first and own the kernel buffers.
  const fuse = new StoreFuse(mnt, ops, { timeout: false, force: false, mkdir: false });
  await new Promise<void>((done, fail) => {
    fuse.mount((err) => {
      if (err) fail(new StoreError('E_IO', `cannot mount FUSE at ${mnt}: ${err.message}`, { path: mnt }));
      else done();
    });
  });
  log.info({ mountpoint: mnt, options: mountOpts }, 'FUSE mounted');

  let unmounting: Promise<void> | undefined;
  return {
    mountpoint: mnt,
    unmount(): Promise<void> {
      unmounting ??= new Promise<void>((done, fail) => {
        fuse.unmount((err) => {
          if (err) fail(new StoreError('E_IO', `cannot unmount ${mnt}: ${err.message}`, { path: mnt }));
          else {
            log.info({ mountpoint: mnt }, 'FUSE unmounted');
            done();
          }
        });
      });
      return unmounting;
    },
  };
}

export { FsError };
