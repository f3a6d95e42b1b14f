import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { FsError } from '../../src/fs/errno.js';
import { ROOT_DIR_ATTR, S_IFREG, type Attr, type VirtualFs } from '../../src/fs/vfs.js';
import { StoreError } from '../../src/util/errors.js';
import { fakeFsStubs, mountFakeFs, type FakeMount } from '../helpers/fake-vfs.js';
import { probeOne } from '../helpers/fuse.js';

const SIZE = 8 * 1024 * 1024 + 4321;
const content = Buffer.alloc(SIZE);
for (let i = 0; i < SIZE; i++) content[i] = (i * 131 + (i >> 11)) & 0xff;
const expected = 'sha256:' + createHash('sha256').update(content).digest('hex');

const reads: Array<{ offset: number; length: number }> = [];
let getattrs = 0;
const fileAttr: Attr = {
  mode: S_IFREG | 0o444,
  ino: 5,
  uid: 0,
  gid: 0,
  size: SIZE,
  nlink: 1,
  rdev: 0,
  mtime: 7,
};
const fake: VirtualFs = {
  async getattr(path) {
    getattrs++;
    if (path === '/') return { ...ROOT_DIR_ATTR };
    if (path === '/model') return fileAttr;
    throw new StoreError('E_NOT_FOUND', 'no such node', { path });
  },
  async readdir() {
    return [{ name: 'model', attr: fileAttr }];
  },
  async readlink() {
    throw new FsError('EINVAL', 'not a link');
  },
  async open(path) {
    if (path !== '/model') throw new FsError('EISDIR', 'not a file');
    return {
      async read(offset, length) {
        reads.push({ offset, length });
        return content.subarray(offset, offset + length);
      },
    };
  },
  async getxattr() {
    return undefined;
  },
  async listxattr() {
    return [];
  },
  ...fakeFsStubs,
  deadlineMs() {
    return 10_000;
  },
};

/**
 * What the kernel does with the adapter's mount options, for sequential reads: request sizes, and
 * warm re-reads served from the page cache (kernel_cache) even when attributes are revalidated.
 */
describe('fuse adapter: read request size and the kernel page cache', () => {
  let fm: FakeMount;
  let mnt: string;

  beforeAll(async () => {
    // zero timeouts: every open revalidates entry and attributes with us (the worst case)
    fm = await mountFakeFs('sgz-fuse-pc-', fake, { entryTimeoutSec: 0, attrTimeoutSec: 0 });
    mnt = fm.mnt;
  });

  afterAll(async () => {
    await fm?.stop();
  });

  it('a cold sequential read arrives in large requests (128 KiB, the libfuse2 maximum) and is exact', async () => {
    const r = await probeOne<{ sha256: string; length: number }>({ op: 'sha256', path: join(mnt, 'model') });
    expect(r).toEqual({ sha256: expected, length: SIZE });
    expect(reads.reduce((n, x) => n + x.length, 0)).toBeGreaterThanOrEqual(SIZE);
    const largest = Math.max(...reads.map((x) => x.length));
    expect(largest).toBeGreaterThanOrEqual(128 * 1024);
    // all but the tail: full-size requests
    const full = reads.filter((x) => x.length === largest).length;
    expect(full).toBeGreaterThanOrEqual(Math.floor(SIZE / largest) - 2);
  });

  it('a warm re-read by another process is served by the page cache, attributes revalidated or not', async () => {
    const before = reads.length;
    const attrsBefore = getattrs;
    const r = await probeOne<{ sha256: string; length: number }>({ op: 'sha256', path: join(mnt, 'model') });
    expect(r).toEqual({ sha256: expected, length: SIZE });
    // the kernel asked for the attributes again (timeouts 0) ...
    expect(getattrs).toBeGreaterThan(attrsBefore);
    // ... but not for the file's bytes: keep_cache on open, unchanged size/mtime keep the pages.
    // The kernel may still reclaim a few pages under memory pressure from other work (a full test
    // run once re-read 5 of 64 requests' worth): without the page cache all 8 MiB come again.
    const again = reads.slice(before).reduce((n, x) => n + x.length, 0);
    expect(again).toBeLessThan(SIZE / 8);
  });
});
