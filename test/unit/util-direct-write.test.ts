import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { createFileDirect, DIRECT_ALIGN, writeDirectAt } from '../../src/util/direct-write.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'direct-write-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function roundTrip(name: string, data: Buffer): Promise<void> {
  const path = join(dir, name);
  const fh = await createFileDirect(path, data, 0o600);
  await fh.close();
  const st = await stat(path);
  expect(st.size).toBe(data.length);
  expect(st.mode & 0o777).toBe(0o600);
  expect((await readFile(path)).equals(data)).toBe(true);
}

describe('createFileDirect', () => {
  it('writes exactly the bytes: aligned, unaligned tails, several staging rounds, tiny and empty', async () => {
    await roundTrip('aligned', randomBytes(4 << 20));
    await roundTrip('tail', randomBytes((1 << 20) + 4096 * 3 + 123));
    await roundTrip('rounds', randomBytes(3 * (1 << 20) + 5000));
    await roundTrip('tiny', randomBytes(17));
    await roundTrip('empty', Buffer.alloc(0));
  });

  it('writes sharing the staging slots: concurrent files all hold their own bytes', async () => {
    const datas = Array.from({ length: 6 }, (_, i) => randomBytes((1 << 20) * (i % 3) + 777 * (i + 1)));
    const handles = await Promise.all(datas.map((d, i) => createFileDirect(join(dir, `f${i}`), d, 0o600)));
    await Promise.all(handles.map((h) => h.close()));
    for (const [i, d] of datas.entries()) expect((await readFile(join(dir, `f${i}`))).equals(d)).toBe(true);
  });

  it('never replaces an existing file (exclusive create)', async () => {
    const path = join(dir, 'taken');
    await writeFile(path, 'old');
    await expect(createFileDirect(path, randomBytes(1 << 20), 0o600)).rejects.toMatchObject({
      code: 'EEXIST',
    });
    expect(await readFile(path, 'utf8')).toBe('old');
  });

  it('rejects with the write error when the directory is missing', async () => {
    await expect(createFileDirect(join(dir, 'no', 'such'), randomBytes(10), 0o600)).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });
});

describe('writeDirectAt', () => {
  it('writes aligned bytes at an aligned position of an existing file, leaving the rest as it was', async () => {
    const path = join(dir, 'blob');
    const before = randomBytes(6 << 20);
    await writeFile(path, before);
    const mid = randomBytes((2 << 20) + 3 * DIRECT_ALIGN);
    const at = 5 * DIRECT_ALIGN;
    const fh = await open(path, constants.O_WRONLY);
    try {
      await writeDirectAt(fh, mid, at);
    } finally {
      await fh.close();
    }
    const after = await readFile(path);
    expect(after.length).toBe(before.length);
    expect(after.subarray(0, at).equals(before.subarray(0, at))).toBe(true);
    expect(after.subarray(at, at + mid.length).equals(mid)).toBe(true);
    expect(after.subarray(at + mid.length).equals(before.subarray(at + mid.length))).toBe(true);
  });

  it('refuses an unaligned position or length before touching the file', async () => {
    const fh = await open(join(dir, 'x'), 'w');
    try {
      await expect(writeDirectAt(fh, Buffer.alloc(DIRECT_ALIGN), 100)).rejects.toBeInstanceOf(RangeError);
      await expect(writeDirectAt(fh, Buffer.alloc(100), 0)).rejects.toBeInstanceOf(RangeError);
    } finally {
      await fh.close();
    }
    expect((await stat(join(dir, 'x'))).size).toBe(0);
  });

  it('more concurrent writers than staging slots: each waits for a slot and writes its own bytes', async () => {
    const path = join(dir, 'many');
    await writeFile(path, Buffer.alloc(0));
    const piece = (1 << 20) + DIRECT_ALIGN;
    const datas = Array.from({ length: 10 }, () => randomBytes(piece));
    const fh = await open(path, constants.O_WRONLY);
    try {
      await Promise.all(datas.map((d, i) => writeDirectAt(fh, d, i * piece)));
    } finally {
      await fh.close();
    }
    expect((await readFile(path)).equals(Buffer.concat(datas))).toBe(true);
  });
});
