import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

// A file system without O_DIRECT (the store's root on one that refuses it): every direct create
// rejects the way util/direct-write.ts reports it.
const direct = vi.hoisted(() => ({ calls: 0 }));
vi.mock('../../src/util/direct-write.js', () => ({
  createFileDirect: async (): Promise<never> => {
    direct.calls++;
    throw Object.assign(new Error('file system refuses O_DIRECT'), { code: 'E_NO_DIRECT' });
  },
}));

const { ChunkCache } = await import('../../src/cache/index.js');

const digestOf = (b: Buffer): string => 'sha256:' + createHash('sha256').update(b).digest('hex');
const chunkPath = (root: string, digest: string): string => {
  const hex = digest.slice('sha256:'.length);
  return join(root, 'cache', 'chunks', 'sha256', hex.slice(0, 2), hex);
};

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'cache-direct-'));
  direct.calls = 0;
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('chunk cache on a file system that refuses O_DIRECT', () => {
  it('writes large chunks through the page cache instead, says so once, and stops trying', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(s) });
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 0, logger });
    const a = randomBytes((2 << 20) + 99);
    const b = randomBytes(3 << 20);
    expect(await cache.put(digestOf(a), Buffer.from(a))).toBe(false);
    expect(await cache.put(digestOf(b), Buffer.from(b))).toBe(false);
    expect(direct.calls).toBe(1);
    expect((await readFile(chunkPath(root, digestOf(a)))).equals(a)).toBe(true);
    expect((await readFile(chunkPath(root, digestOf(b)))).equals(b)).toBe(true);
    expect(cache.onDisk(digestOf(a)) && cache.onDisk(digestOf(b))).toBe(true);
    expect(lines.filter((l) => l.includes('refuses O_DIRECT'))).toHaveLength(1);
    await cache.close();
  });

  it('never tries O_DIRECT for small chunks', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 0 });
    const s = randomBytes(64 << 10);
    await cache.put(digestOf(s), Buffer.from(s));
    expect(direct.calls).toBe(0);
    expect((await readFile(chunkPath(root, digestOf(s)))).equals(s)).toBe(true);
    await cache.close();
  });
});
