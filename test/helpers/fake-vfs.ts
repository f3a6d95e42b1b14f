import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mountVirtualFs, type FuseMountOptions, type MountedFs } from '../../src/fs/fuse-adapter.js';
import { emptyStatfs, type VirtualFs } from '../../src/fs/vfs.js';
import { StoreError } from '../../src/util/errors.js';

/** Fake VirtualFs implementations for FUSE adapter tests, and their mount. */

/** statfs of a fake: 4 KiB blocks, no space used or free, 255-byte names. */

/**
 * The operations a fake does not vary: `create` (the ALS use notification) and `rmdir` (release)
 * answer ENOENT, `statfs` is empty.
 */
export const fakeFsStubs: Pick<VirtualFs, 'create' | 'rmdir' | 'statfs'> = {
  async create() {
    throw new StoreError('E_NOT_FOUND', 'use notification');
  },
  async rmdir() {
    throw new StoreError('E_NOT_FOUND', 'released');
  },
  async statfs() {
    return emptyStatfs();
  },
};

export interface FakeMount {
  /** The temp dir holding the mount point. */
  dir: string;
  mnt: string;
  mounted: MountedFs;
  /** Unmount and delete the temp dir. */
  stop(): Promise<void>;
}

/** Mount `vfs` at `<new temp dir named prefix…>/mnt` (allow_other unless told otherwise). */
export async function mountFakeFs(
  prefix: string,
  vfs: VirtualFs,
  opts: FuseMountOptions = {},
): Promise<FakeMount> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const mnt = join(dir, 'mnt');
  await mkdir(mnt);
  const mounted = await mountVirtualFs(mnt, vfs, { allowOther: true, ...opts });
  return {
    dir,
    mnt,
    mounted,
    stop: async () => {
      await mounted.unmount();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
