import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseMountinfo } from '../../bench/lib/mounts.js';
import {
  canonicalizeProfile,
  interpreterOf,
  withInterpreters,
  parseStraceEvents,
  parseStraceOpens,
  prioritizeForLayers,
  selectPrioritized,
  resolveInRoot,
} from '../../bench/lib/profile.js';
import { parseProcSample } from '../../bench/lib/store-process.js';

// Shape of `strace -f -qq -e trace=open,openat,execve,chroot -e status=successful` output (pid prefix).
const STRACE = `4100  execve("/usr/bin/env", ["env", "-i"], 0x7ffd /* 20 vars */) = 0
4100  openat(AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3
4100  execve("/usr/bin/unshare", ["unshare", "--root=/tmp/r"], 0x5 /* 1 var */) = 0
4100  openat(AT_FDCWD, "/lib/x86_64-linux-gnu/libc.so.6", O_RDONLY|O_CLOEXEC) = 3
4100  chroot("/tmp/r")                  = 0
4100  execve("/usr/bin/python3", ["python3", "run.py"], 0x55 /* 2 vars */) = 0
4100  openat(AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3
4100  openat(AT_FDCWD, "run.py", O_RDONLY|O_CLOEXEC) = 3
4101  open("/etc/passwd", O_RDONLY) = 4
4101  openat(3, "relative-to-dirfd", O_RDONLY) = 5
4101  openat(3, "/abs/with/dirfd", O_RDONLY) = 5
4101  openat(AT_FDCWD, "/data/caf\\303\\251 \\"q\\".txt", O_RDONLY) = 6
4101  openat(AT_FDCWD, "/missing", O_RDONLY) = -1 ENOENT (No such file or directory)
4100  openat(AT_FDCWD, "/etc/passwd", O_RDONLY) = 7
4100  +++ exited with 0 +++`;

describe('strace parsing', () => {
  it('attributes read, pread64 and mmap bytes to the path behind each descriptor', () => {
    const text = [
      '7  chroot("/r") = 0',
      '7  openat(AT_FDCWD, "/m/w.bin", O_RDONLY|O_CLOEXEC) = 3',
      '7  read(3, ""..., 8) = 8',
      '7  pread64(3, ""..., 1048576, 4096) = 1048576',
      '8  read(3, ""..., 100) = 100', // another process: its fd 3 is something else
      '7  openat(AT_FDCWD, "/lib/libc.so.6", O_RDONLY|O_CLOEXEC) = 4',
      '7  mmap(NULL, 2000000, PROT_READ, MAP_PRIVATE|MAP_DENYWRITE, 4, 0) = 0x7f0000000000',
      '7  mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000200000',
      '7  openat(AT_FDCWD, "/etc/x", O_RDONLY) = 3', // fd 3 reused: later reads count for /etc/x
      '7  read(3, ""..., 64) = 10',
      '7  read(3, "", 64) = 0',
    ].join('\n');
    expect(parseStraceEvents(text)).toEqual([
      { path: '/m/w.bin', exec: false, bytes: 8 + 1048576 },
      { path: '/lib/libc.so.6', exec: false, bytes: 2000000 },
      { path: '/etc/x', exec: false, bytes: 10 },
    ]);
  });

  it('prioritises small, executed, well-covered or unknown files, not big barely-read ones', () => {
    const MiB = 1 << 20;
    const got = selectPrioritized({
      source: 't',
      files: ['/bin/big-exec', '/small', '/shard', '/covered', '/unknown', '/link'],
      details: {
        '/bin/big-exec': { size: 100 * MiB, bytesRead: 0, exec: true },
        '/small': { size: 16 * MiB, bytesRead: 0 },
        '/shard': { size: 400 * MiB, bytesRead: 8 * MiB },
        '/covered': { size: 40 * MiB, bytesRead: 10 * MiB },
        '/unknown': { size: 400 * MiB },
      },
    });
    expect(got.files).toEqual(['/bin/big-exec', '/small', '/covered', '/unknown', '/link']);
    expect(got.skipped).toEqual([{ path: '/shard', size: 400 * MiB, bytesRead: 8 * MiB }]);
  });

  it('keeps successful opens and execs after the chroot, in first-open order, resolved against cwd', () => {
    const got = parseStraceOpens(STRACE, '/app');
    expect(got).toEqual([
      '/usr/bin/python3',
      '/etc/ld.so.cache',
      '/app/run.py',
      '/etc/passwd',
      '/abs/with/dirfd',
      '/data/café "q".txt',
    ]);
  });

  it('records nothing when no chroot happened', () => {
    expect(parseStraceOpens('1 openat(AT_FDCWD, "/x", O_RDONLY) = 3')).toEqual([]);
  });
});

describe('paths inside an image root', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-bench-root-'));
    // usrmerge-like layout: /lib -> usr/lib, /bin -> usr/bin, and a chain of symlinks
    await mkdir(join(root, 'usr/lib/x86_64-linux-gnu'), { recursive: true });
    await mkdir(join(root, 'usr/bin'), { recursive: true });
    await mkdir(join(root, 'app'), { recursive: true });
    await symlink('usr/lib', join(root, 'lib'));
    await symlink('usr/bin', join(root, 'bin'));
    await writeFile(join(root, 'usr/lib/x86_64-linux-gnu/libc.so.6.1'), 'libc');
    await symlink('libc.so.6.1', join(root, 'usr/lib/x86_64-linux-gnu/libc.so.6'));
    await writeFile(join(root, 'usr/bin/python3.11'), 'py');
    await symlink('python3.11', join(root, 'usr/bin/python3'));
    // absolute link: must resolve inside the root, not on the host
    await symlink('/usr/bin/python3', join(root, 'app/py'));
    await symlink('../../../../../../etc/hostname-nope', join(root, 'app/escape'));
    await writeFile(join(root, 'app/run.py'), 'x');
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('resolves symlinks relative to the image root, recording the links on the way', async () => {
    expect(await resolveInRoot(root, '/lib/x86_64-linux-gnu/libc.so.6')).toEqual({
      links: ['/lib', '/usr/lib/x86_64-linux-gnu/libc.so.6'],
      target: '/usr/lib/x86_64-linux-gnu/libc.so.6.1',
    });
    expect(await resolveInRoot(root, '/app/py')).toEqual({
      links: ['/app/py', '/usr/bin/python3'],
      target: '/usr/bin/python3.11',
    });
    // ".." cannot climb above the root
    expect(await resolveInRoot(root, '/app/escape')).toBeUndefined();
    expect(await resolveInRoot(root, '/nope')).toBeUndefined();
  });

  it('inserts the interpreter chain right after each executed file', async () => {
    await writeFile(join(root, 'app/tool.sh'), '#!/bin/python3\n');
    const got = await withInterpreters(root, [
      { path: '/app/tool.sh', exec: true, bytes: 0 },
      { path: '/app/run.py', exec: false, bytes: 5 },
      { path: '/app/tool.sh', exec: true, bytes: 0 },
    ]);
    // /bin/python3 is a text file here ("py"), so the chain stops there
    expect(got.map((e) => e.path)).toEqual(['/app/tool.sh', '/bin/python3', '/app/run.py']);
    expect(got[1]!.exec).toBe(true);
  });

  it('canonicalises a profile to regular files plus their links, without duplicates or /proc', async () => {
    const got = await canonicalizeProfile(root, [
      { path: '/bin/python3', exec: true },
      '/proc/self/maps',
      { path: '/usr/bin/python3.11', bytes: 2 },
      '/app',
      { path: '/app/run.py', bytes: 1 },
      '/missing',
    ]);
    expect(got.files).toEqual(['/bin', '/usr/bin/python3', '/usr/bin/python3.11', '/app/run.py']);
    // accesses through links fold onto the file they name
    expect(got.details).toEqual({
      '/usr/bin/python3.11': { size: 2, exec: true, bytesRead: 2 },
      '/app/run.py': { size: 1, bytesRead: 1 },
    });
  });
});

describe('interpreters of executed files', () => {
  /** A minimal little-endian ELF64 image: header, program headers, then the PT_INTERP string. */
  const elf = (interp: string | undefined): Buffer => {
    const types = interp === undefined ? [1] : [1, 3]; // PT_LOAD [, PT_INTERP]
    const strOff = 64 + 56 * types.length;
    const img = Buffer.alloc(strOff + (interp?.length ?? 0) + 1);
    img.writeUInt32BE(0x7f454c46, 0);
    img[4] = 2; // ELFCLASS64
    img[5] = 1; // little endian
    img.writeBigUInt64LE(64n, 0x20); // e_phoff
    img.writeUInt16LE(56, 0x36); // e_phentsize
    img.writeUInt16LE(types.length, 0x38); // e_phnum
    types.forEach((type, i) => {
      const ph = 64 + i * 56;
      img.writeUInt32LE(type, ph);
      if (type === 3) {
        img.writeBigUInt64LE(BigInt(strOff), ph + 8); // p_offset
        img.writeBigUInt64LE(BigInt(interp!.length + 1), ph + 32); // p_filesz, NUL included
      }
    });
    if (interp !== undefined) img.write(interp, strOff, 'latin1');
    return img;
  };
  const bufReader = (b: Buffer) => async (o: number, l: number) => b.subarray(o, o + l);

  it('finds PT_INTERP of a dynamic ELF64 image; a static one has none', async () => {
    // the host binaries themselves are checked against readelf in test/integration/bench-host-tools
    expect(await interpreterOf(bufReader(elf('/lib64/ld-linux-x86-64.so.2')))).toBe(
      '/lib64/ld-linux-x86-64.so.2',
    );
    expect(await interpreterOf(bufReader(elf(undefined)))).toBeUndefined();
  });

  it('reads the #! line of scripts and ignores data files', async () => {
    const buf = (s: string) => async (o: number, l: number) => Buffer.from(s).subarray(o, o + l);
    expect(await interpreterOf(buf('#!/usr/bin/env python3\nprint(1)\n'))).toBe('/usr/bin/env');
    expect(await interpreterOf(buf('#! /bin/sh -e\n'))).toBe('/bin/sh');
    expect(await interpreterOf(buf('plain text'))).toBeUndefined();
    expect(await interpreterOf(buf('\x7fELF'))).toBeUndefined();
  });
});

describe('prioritize per layer', () => {
  it('gives each file to the topmost layer that has it, keeping profile order', () => {
    const layers = [
      new Set(['etc/passwd', 'usr/bin/python3']),
      new Set(['usr/bin/python3', 'app/a']),
      new Set(['app/b']),
    ];
    expect(
      prioritizeForLayers(['/app/b', '/usr/bin/python3', '/etc/passwd', '/app/a', '/not/there'], layers),
    ).toEqual([['etc/passwd'], ['usr/bin/python3', 'app/a'], ['app/b']]);
  });
});

describe('proc parsing', () => {
  it('reads mount points (with octal escapes) and file system types', () => {
    const text =
      '36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - ext4 /dev/vda rw\n' +
      '40 36 0:44 / /tmp/sgz/r/1/m rw,nosuid shared:3 - fuse.stargzstore stargzstore rw,user_id=0\n';
    expect(parseMountinfo(text)).toEqual([
      { mountPoint: '/mnt/with space', fsType: 'ext4', source: '/dev/vda' },
      { mountPoint: '/tmp/sgz/r/1/m', fsType: 'fuse.stargzstore', source: 'stargzstore' },
    ]);
  });

  it('reads CPU ticks after the last ")" of comm and VmHWM', () => {
    // comm with spaces and parentheses; fields 14-17 = utime stime cutime cstime
    const stat = '1234 (node (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 11 0 100 1000 200';
    const status = 'Name:\tnode\nVmPeak:\t 999 kB\nVmHWM:\t  123456 kB\nVmRSS:\t 1000 kB\n';
    expect(parseProcSample(stat, status, 100)).toEqual({ peakRssKiB: 123456, cpuMs: 3100 });
  });
});
