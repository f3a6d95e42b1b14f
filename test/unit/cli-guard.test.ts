import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkMountpointOperand, closest, editDistance } from '../../src/cli/command-guard.js';
import { acquireInstanceLock, parseLockFile, processStartTime } from '../../src/cli/instance-lock.js';
import { resolveLogFormat } from '../../src/util/logger.js';

const COMMANDS = ['serve', 'layer', 'image', 'status', 'help'];

describe('mistyped commands', () => {
  it('edit distance counts swaps as one edit', () => {
    expect(editDistance('stauts', 'status')).toBe(1);
    expect(editDistance('statu', 'status')).toBe(1);
    expect(editDistance('layre', 'layer')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
  });

  it('suggests the nearest command only when it is close', () => {
    expect(closest('stauts', COMMANDS)).toBe('status');
    expect(closest('Staus', COMMANDS)).toBe('status');
    expect(closest('imgae', COMMANDS)).toBe('image');
    expect(closest('mnt', COMMANDS)).toBeUndefined();
    expect(closest('var-lib-store', COMMANDS)).toBeUndefined();
  });

  it('absolute paths and existing directories are mountpoints; anything else is refused', async () => {
    await expect(checkMountpointOperand('/var/lib/stargz-store/store', COMMANDS)).resolves.toBeUndefined();
    await expect(checkMountpointOperand('.', COMMANDS)).resolves.toBeUndefined();
    await expect(checkMountpointOperand('stauts', COMMANDS)).rejects.toThrow(
      "unknown command 'stauts' (did you mean 'status'?)",
    );
    await expect(checkMountpointOperand('package.json', COMMANDS)).rejects.toThrow(
      /unknown command 'package.json'/,
    );
  });
});

describe('instance lock', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lock-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads its own start time from /proc', async () => {
    expect(await processStartTime(process.pid)).toMatch(/^\d+$/);
    expect(await processStartTime(999_999_999)).toBeUndefined();
    expect(parseLockFile('12 345\n')).toEqual({ pid: 12, startTime: '345' });
    expect(parseLockFile('garbage')).toBeUndefined();
  });

  it('refuses a lock held by a live process, naming its PID', async () => {
    const path = join(dir, 'x.lock');
    // The parent of this test process is alive and is not us.
    await writeFile(path, `${process.ppid} ${await processStartTime(process.ppid)}\n`);
    await expect(acquireInstanceLock(path, 'root /r')).rejects.toThrow(
      `another stargz-store (pid ${process.ppid}) is running on root /r; stop it first (lock ${path})`,
    );
  });

  it('takes over a stale lock (dead PID, or a reused PID with another start time) and releases it', async () => {
    const path = join(dir, 'x.lock');
    await writeFile(path, `${process.ppid} 1\n`);
    const lock = await acquireInstanceLock(path, 'root /r');
    await lock.release();
    await writeFile(path, '999999999 5\n');
    const again = await acquireInstanceLock(path, 'root /r');
    await again.release();
  });
});

describe('log format', () => {
  it('auto: text on a terminal, JSON otherwise', () => {
    expect(resolveLogFormat('auto', true)).toBe('text');
    expect(resolveLogFormat(undefined, false)).toBe('json');
    expect(resolveLogFormat('json', true)).toBe('json');
    expect(resolveLogFormat('text', false)).toBe('text');
  });
});
