import { afterEach, describe, expect, it, vi } from 'vitest';
import { Errno, FsError, errnoFor } from '../../src/fs/errno.js';
import { buildMountOptions } from '../../src/fs/mount-util.js';
import { withDeadline } from '../../src/util/abort.js';
import { DigestMismatchError, StoreError } from '../../src/util/errors.js';

describe('errno mapping at the FUSE edge', () => {
  it('maps StoreError codes: absent -> ENOENT, bad input -> EINVAL, everything else -> EIO', () => {
    expect(errnoFor(new StoreError('E_NOT_FOUND', 'x'))).toBe('ENOENT');
    expect(errnoFor(new StoreError('E_INVALID_ARGUMENT', 'x'))).toBe('EINVAL');
    expect(errnoFor(new StoreError('E_BAD_REFERENCE', 'x'))).toBe('EINVAL');
    for (const code of [
      'E_DEADLINE',
      'E_LAYER_BAD',
      'E_REGISTRY_NETWORK',
      'E_DECOMPRESS',
      'E_ABORTED',
    ] as const) {
      expect(errnoFor(new StoreError(code, 'x'))).toBe('EIO');
    }
    expect(errnoFor(new DigestMismatchError('chunk', 'sha256:a', 'sha256:b'))).toBe('EIO');
    expect(errnoFor(new Error('plain'))).toBe('EIO');
    expect(errnoFor(new FsError('ENOTDIR', 'x'))).toBe('ENOTDIR');
    expect(Errno.ERANGE).toBe(34);
    expect(Errno.ENODATA).toBe(61);
  });
});

describe('mount options', () => {
  it('are read-write, allow_other, use_ino, 1 s caches, no default_permissions', () => {
    const o = buildMountOptions({ allowOther: true }).replace(/^-o/, '').split(',');
    expect(o).toEqual(
      expect.arrayContaining([
        'allow_other',
        'use_ino',
        'entry_timeout=1',
        'attr_timeout=1',
        'negative_timeout=0',
        'kernel_cache',
        'fsname=stargzstore',
      ]),
    );
    expect(o).not.toContain('ro');
    expect(o).not.toContain('default_permissions');
    expect(buildMountOptions({}).includes('allow_other')).toBe(false);
  });

  it('refuses option injection through the fs name', () => {
    expect(() => buildMountOptions({ fsname: 'x,suid' })).toThrow(StoreError);
  });
});

describe('withDeadline', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('rejects with E_DEADLINE and aborts the signal even if the work ignores it', async () => {
    vi.useFakeTimers();
    let seen: AbortSignal | undefined;
    const pending = withDeadline(50, (signal) => {
      seen = signal;
      return new Promise(() => undefined);
    });
    const outcome = expect(pending).rejects.toMatchObject({ code: 'E_DEADLINE' });
    await vi.advanceTimersByTimeAsync(49);
    expect(seen?.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await outcome;
    expect(seen?.aborted).toBe(true);
    await expect(withDeadline(1000, async () => 7)).resolves.toBe(7);
  });
});
