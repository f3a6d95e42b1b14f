import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtemp, mkdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { FsError } from '../../src/fs/errno.js';
import { clearStaleMount, isMountpoint } from '../../src/fs/mount-util.js';
import { S_IFCHR, S_IFDIR, S_IFLNK, S_IFREG, type Attr, type VirtualFs } from '../../src/fs/vfs.js';
import { StoreError } from '../../src/util/errors.js';
import { fakeFsStubs, mountFakeFs, type FakeMount } from '../helpers/fake-vfs.js';
import { probe, probeOne, runChild } from '../helpers/fuse.js';

const require = createRequire(import.meta.url);
const content = Buffer.from('hello, fuse adapter\n');
const attrs: Record<string, Attr> = {
  '/': { mode: S_IFDIR | 0o755, ino: 1, uid: 0, gid: 0, size: 0, nlink: 3, rdev: 0, mtime: 0 },
  '/dir': { mode: S_IFDIR | 0o711, ino: 7, uid: 12, gid: 34, size: 0, nlink: 2, rdev: 0, mtime: 1577934245 },
  '/file': {
    mode: S_IFREG | 0o644,
    ino: 8,
    uid: 0,
    gid: 0,
    size: content.length,
    nlink: 2,
    rdev: 0,
    mtime: 0,
  },
  '/hard': {
    mode: S_IFREG | 0o644,
    ino: 8,
    uid: 0,
    gid: 0,
    size: content.length,
    nlink: 2,
    rdev: 0,
    mtime: 0,
  },
  '/link': { mode: S_IFLNK | 0o777, ino: 9, uid: 0, gid: 0, size: 4, nlink: 1, rdev: 0, mtime: 0 },
  '/wh': { mode: S_IFCHR, ino: 10, uid: 0, gid: 0, size: 0, nlink: 1, rdev: 0, mtime: 0 },
  // makedev(4, 300) in Linux new encoding: (minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12)
  '/tty': {
    mode: S_IFCHR | 0o600,
    ino: 11,
    uid: 0,
    gid: 0,
    size: 0,
    nlink: 1,
    rdev: (300 & 0xff) | (4 << 8) | ((300 & ~0xff) << 12),
    mtime: 0,
  },
};

let hangCalls = 0;
const fake: VirtualFs = {
  async getattr(path, ctx) {
    if (/^\/hd\d+$/.test(path)) return { ...attrs['/dir']!, ino: 100 + Number(path.slice(3)) };
    const m = /^\/hd(\d+)\/x$/.exec(path);
    if (m) {
      hangCalls++;
      // never resolves: only the deadline can answer
      return await new Promise<Attr>((_, reject) => {
        if (Number(m[1]) % 2 === 0) ctx.signal.addEventListener('abort', () => reject(new Error('aborted')));
      });
    }
    if (path === '/bad') throw new StoreError('E_INVALID_ARGUMENT', 'bad name');
    const a = attrs[path];
    if (!a) throw new StoreError('E_NOT_FOUND', 'no such node', { path });
    return a;
  },
  async readdir(path) {
    if (path !== '/') throw new FsError('ENOTDIR', 'not a dir');
    return Object.entries(attrs)
      .filter(([p]) => p !== '/')
      .map(([p, attr]) => ({ name: p.slice(1), attr }));
  },
  async readlink(path) {
    if (path !== '/link') throw new FsError('EINVAL', 'not a link');
    return 'file';
  },
  async open(path) {
    if (path !== '/file' && path !== '/hard') throw new FsError('EISDIR', 'not a file');
    return {
      async read(offset, length) {
        return content.subarray(offset, offset + length);
      },
    };
  },
  async getxattr(path, name) {
    if (path === '/dir' && name === 'trusted.overlay.opaque') return Buffer.from('y');
    if (path === '/dir' && name === 'user.long') return Buffer.from('0123456789');
    return undefined;
  },
  async listxattr(path) {
    return path === '/dir' ? ['trusted.overlay.opaque', 'user.long'] : [];
  },
  ...fakeFsStubs,
  deadlineMs(op, path) {
    return path.endsWith('/x') ? 2000 : 5000;
  },
};

describe('fuse adapter (real FUSE mount, probed from a child process)', () => {
  let fm: FakeMount;
  let mnt: string;

  beforeAll(async () => {
    fm = await mountFakeFs('sgz-fuse-', fake);
    mnt = fm.mnt;
  });

  afterAll(async () => {
    await fm?.stop();
  });

  it('mounts read-write with allow_other, fsname stargzstore and no default_permissions', async () => {
    const mounts = await readFile('/proc/self/mounts', 'utf8');
    const line = mounts.split('\n').find((l) => l.split(' ')[1] === mnt);
    expect(line).toBeDefined();
    const [fsname, , fstype, options] = line!.split(' ');
    expect(fsname).toBe('stargzstore');
    expect(fstype).toBe('fuse');
    expect(options!.split(',')).toContain('rw');
    expect(options!.split(',')).toContain('allow_other');
    expect(options).not.toContain('default_permissions');
  });

  it('reports attributes, our inode numbers (shared by hardlinks) and device numbers', async () => {
    const [root, d, f, h, wh, tty] = (await probe([
      { op: 'stat', path: mnt },
      { op: 'stat', path: join(mnt, 'dir') },
      { op: 'stat', path: join(mnt, 'file') },
      { op: 'stat', path: join(mnt, 'hard') },
      { op: 'lstat', path: join(mnt, 'wh') },
      { op: 'lstat', path: join(mnt, 'tty') },
    ])) as Array<Record<string, number>>;
    expect(root!.mode).toBe(S_IFDIR | 0o755);
    expect(d).toMatchObject({ mode: S_IFDIR | 0o711, ino: 7, uid: 12, gid: 34, mtime: 1577934245 });
    expect(f).toMatchObject({ mode: S_IFREG | 0o644, ino: 8, nlink: 2, size: content.length });
    expect(h!.ino).toBe(f!.ino);
    expect(wh).toMatchObject({ mode: S_IFCHR, rdevMajor: 0, rdevMinor: 0 });
    expect(tty).toMatchObject({ rdevMajor: 4, rdevMinor: 300 });
  });

  it('readdir carries d_type (char devices as DT_CHR) and our inode numbers', async () => {
    const entries = (await probeOne({ op: 'readdir', path: mnt })) as Array<{
      name: string;
      type: string;
      ino: number;
    }>;
    const byName = new Map(entries.map((e) => [e.name, e]));
    expect(byName.get('wh')).toMatchObject({ type: 'chr', ino: 10 });
    expect(byName.get('dir')).toMatchObject({ type: 'dir', ino: 7 });
    expect(byName.get('file')).toMatchObject({ type: 'reg', ino: 8 });
    expect(byName.get('link')).toMatchObject({ type: 'lnk' });
    expect(byName.has('.')).toBe(true);
  });

  it('reads, readlinks and answers xattr size queries, ERANGE and ENODATA exactly', async () => {
    const r = await probe([
      { op: 'read', path: join(mnt, 'file') },
      { op: 'read', path: join(mnt, 'file'), offset: 7, length: 4 },
      { op: 'readlink', path: join(mnt, 'link') },
      { op: 'getxattr', path: join(mnt, 'dir'), name: 'trusted.overlay.opaque' },
      { op: 'getxattr', path: join(mnt, 'dir'), name: 'user.long', size: 0 },
      { op: 'getxattr', path: join(mnt, 'dir'), name: 'user.long', size: 4 },
      { op: 'getxattr', path: join(mnt, 'dir'), name: 'user.long', size: 10 },
      { op: 'getxattr', path: join(mnt, 'dir'), name: 'user.none' },
      { op: 'listxattr', path: join(mnt, 'dir') },
      { op: 'listxattr', path: join(mnt, 'file') },
    ]);
    expect(r[0]).toEqual({ hex: content.toString('hex'), length: content.length });
    expect(r[1]).toEqual({ hex: Buffer.from('fuse').toString('hex'), length: 4 });
    expect(r[2]).toBe('file');
    expect(r[3]).toBe('y');
    expect(r[4]).toEqual({ size: 10, value: null });
    expect(r[5]).toMatchObject({ errno: 'ERANGE' });
    expect(r[6]).toEqual({ size: 10, value: '0123456789' });
    expect(r[7]).toMatchObject({ errno: 'ENODATA' });
    expect(r[8]).toEqual(['trusted.overlay.opaque', 'user.long']);
    expect(r[9]).toEqual([]);
  });

  it('maps errors to errnos, refuses writes with EROFS and answers access with 0', async () => {
    const r = await probe([
      { op: 'stat', path: join(mnt, 'missing') },
      { op: 'stat', path: join(mnt, 'bad') },
      { op: 'create', path: join(mnt, 'use') },
      { op: 'rmdir', path: join(mnt, 'dir') },
      { op: 'mkdir', path: join(mnt, 'newdir') },
      { op: 'unlink', path: join(mnt, 'file') },
      { op: 'access', path: join(mnt, 'file') },
      { op: 'statvfs', path: mnt },
    ]);
    expect(r[0]).toMatchObject({ errno: 'ENOENT' });
    expect(r[1]).toMatchObject({ errno: 'EINVAL' });
    expect(r[2]).toMatchObject({ errno: 'ENOENT' });
    expect(r[3]).toMatchObject({ errno: 'ENOENT' });
    expect(r[4]).toMatchObject({ errno: 'EROFS' });
    expect(r[5]).toMatchObject({ errno: 'EROFS' });
    expect(r[6]).toBe(true);
    expect(r[7]).toEqual({ bsize: 4096, namemax: 255, blocks: 0 });
  });

  it('answers hanging operations with EIO at their deadline while other operations keep working', async () => {
    const before = hangCalls;
    // More stuck requests than libfuse keeps idle worker threads (10), each in its own directory
    // (without FUSE_PARALLEL_DIROPS, which libfuse2 cannot negotiate, the kernel serialises LOOKUPs
    // within one directory). Even numbers honour the abort signal, odd ones ignore it. coreutils
    // `stat` children: cheap to start, so their run time is the syscall's.
    const stuck = Array.from({ length: 14 }, (_, i) => runChild('stat', [join(mnt, `hd${i}`, 'x')]));
    await new Promise((r) => setTimeout(r, 300));
    const ok = await runChild('stat', ['-c', '%i', join(mnt, 'dir')]);
    const results = await Promise.all(stuck);
    expect(ok.code).toBe(0);
    expect(ok.stdout.trim()).toBe('7');
    // answered while the stuck lookups were still waiting for their 2 s deadline
    expect(ok.ms).toBeLessThan(1500);
    for (const r of results) {
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/Input\/output error/);
      // the syscall took the deadline, not a multiple of it (slack for a loaded machine)
      expect(r.ms).toBeGreaterThanOrEqual(1900);
      expect(r.ms).toBeLessThan(4500);
    }
    expect(hangCalls - before).toBe(14);
  });
});

describe('mount helpers', () => {
  it('clearStaleMount leaves plain directories alone and clears a mount whose daemon died', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sgz-stale-'));
    const mnt = join(dir, 'mnt');
    await mkdir(mnt);
    try {
      expect(await clearStaleMount(mnt)).toBe('none');
      // A separate daemon process mounts, then dies without unmounting (SIGKILL).
      const script = `
        const Fuse = require(${JSON.stringify(require.resolve('fuse-native'))});
        const f = new Fuse(${JSON.stringify(mnt)}, { getattr: (p, cb) => cb(0, { mode: 0o40755, size: 0 }) }, { timeout: false });
        f.mount((err) => { if (err) { console.error(err); process.exit(3); } console.log('mounted'); setInterval(() => {}, 1000); });`;
      const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((resolve, reject) => {
        child.stdout.once('data', () => resolve());
        child.once('exit', (c) => reject(new Error(`mounter exited ${c}`)));
      });
      expect(await isMountpoint(mnt)).toBe(true);
      expect(await clearStaleMount(mnt)).toBe('live');
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      // a child lookup reaches the (dead) daemon; the root's attributes may still be cached
      const st = await runChild('stat', [join(mnt, 'x')]);
      expect(st.code).not.toBe(0);
      expect(st.stderr).toMatch(/not connected/i);
      expect(await clearStaleMount(mnt)).toBe('cleared');
      expect(await isMountpoint(mnt)).toBe(false);
      expect((await runChild('stat', [mnt])).code).toBe(0);
    } finally {
      await runChild('fusermount', ['-uz', mnt]).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
  });
});
