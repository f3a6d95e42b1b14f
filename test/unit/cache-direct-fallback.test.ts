import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

// Counts O_DIRECT creates; `refuse` plays a file system without O_DIRECT (every direct create
// rejects the way util/direct-write.ts reports it), else the real one writes.
const direct = vi.hoisted(() => ({ calls: 0, refuse: true }));
vi.mock('../../src/util/direct-write.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/util/direct-write.js')>();
  return {
    createFileDirect: async (...args: Parameters<typeof real.createFileDirect>) => {
      direct.calls++;
      if (direct.refuse)
        throw Object.assign(new Error('file system refuses O_DIRECT'), { code: 'E_NO_DIRECT' });
      return await real.createFileDirect(...args);
    },
  };
});

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
  direct.refuse = true;
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const MiB = 1024 * 1024;

describe('chunk cache: large chunk files skip the page cache only while filled fast', () => {
  it('a fast fill tries O_DIRECT; refused, it writes through the page cache, says so once and stops trying', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(s) });
    // a clock that stands still: every write falls in the same second (a loopback model read)
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 0, logger, now: () => 0 });
    const chunks = Array.from({ length: 10 }, () => randomBytes(4 * MiB));
    for (const [i, c] of chunks.entries()) {
      await cache.put(digestOf(c), Buffer.from(c));
      // 32 MiB within the second from the 8th chunk on: the first try, refused, and no other
      expect(direct.calls).toBe(i < 7 ? 0 : 1);
    }
    for (const c of chunks) expect((await readFile(chunkPath(root, digestOf(c)))).equals(c)).toBe(true);
    expect(chunks.every((c) => cache.onDisk(digestOf(c)))).toBe(true);
    expect(lines.filter((l) => l.includes('refuses O_DIRECT'))).toHaveLength(1);
    await cache.close();
  });

  it('a slow fill (a 100 Mbit/s link) keeps the page cache', async () => {
    let now = 0;
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 0, now: () => now });
    for (let i = 0; i < 10; i++) {
      const c = randomBytes(4 * MiB);
      await cache.put(digestOf(c), Buffer.from(c));
      now += 330; // ~12 MB/s
    }
    expect(direct.calls).toBe(0);
    await cache.close();
  });

  it('small chunks never go direct, however fast the large ones are written', async () => {
    direct.refuse = false;
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 0, now: () => 0 });
    const large = Array.from({ length: 8 }, () => randomBytes(4 * MiB));
    for (const c of large) await cache.put(digestOf(c), Buffer.from(c));
    expect(direct.calls).toBe(1); // the 8th: 32 MiB within the second, written by the real O_DIRECT path
    const small = randomBytes(64 << 10);
    await cache.put(digestOf(small), Buffer.from(small));
    expect(direct.calls).toBe(1);
    for (const c of [...large, small])
      expect((await readFile(chunkPath(root, digestOf(c)))).equals(c)).toBe(true);
    await cache.close();
  });
});
