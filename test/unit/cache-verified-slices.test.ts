/**
 * ChunkCache.readSlice: slices of chunk files this process verified are read without hashing the
 * chunk again, and any change to such a file (in place, truncated, replaced) sends the read back
 * to the whole-file hash, which removes a corrupt file. A new process trusts nothing it has not
 * hashed itself.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rename, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { stampOf } from '../../src/cache/verified-files.js';

const digestOf = (b: Buffer): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

let root: string;
const opened: ChunkCache[] = [];

async function openCache(opts: { maxBytes?: number } = {}): Promise<ChunkCache> {
  // memoryBytes 1: nothing is served from memory, every slice comes from the chunk file
  const c = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 1, ...opts });
  await c.whenScanned();
  opened.push(c);
  return c;
}

/** A random chunk of `size` bytes, put and on disk. */
async function storedChunk(c: ChunkCache, size: number) {
  const data = randomBytes(size);
  const d = digestOf(data);
  await c.put(d, data);
  await c.flush();
  return { data, d, file: c.paths.chunkFile(d.slice('sha256:'.length)) };
}

const openFds = async (): Promise<number> => (await readdir('/proc/self/fd')).length;

/** Handles close asynchronously: wait through the event loop (not a timer) until at most `n` are open. */
async function fdsAtMost(n: number): Promise<number> {
  for (let i = 0; i < 100 && (await openFds()) > n; i++) await new Promise(setImmediate);
  return await openFds();
}

async function slice(c: ChunkCache, digest: string, size: number, from: number, to: number) {
  const out = Buffer.alloc(to - from + 8, 0xee);
  const ok = await c.readSlice(digest, size, { from, to }, out, 4);
  return {
    ok,
    bytes: out.subarray(4, 4 + to - from),
    guard: [out.subarray(0, 4), out.subarray(4 + to - from)],
  };
}

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'sgz-slices-'));
});
afterEach(async () => {
  for (const c of opened.splice(0)) await c.close();
  await rm(root, { recursive: true, force: true });
});

describe('ChunkCache.readSlice', () => {
  it('reads the requested bytes of a chunk it wrote, touching nothing around them', async () => {
    const c = await openCache();
    const { data, d } = await storedChunk(c, 300_000);
    expect(c.hasVerified(d)).toBe(true);
    for (const [from, to] of [
      [0, 1],
      [1000, 132_072],
      [299_999, 300_000],
      [0, 300_000],
    ] as const) {
      const r = await slice(c, d, data.length, from, to);
      expect(r.ok).toBe(true);
      expect(r.bytes.equals(data.subarray(from, to))).toBe(true);
      for (const g of r.guard) expect(g.every((x) => x === 0xee)).toBe(true);
    }
    expect(c.stats().corrupt).toBe(0);
  });

  it('refuses a size the chunk does not have (a TOC that disagrees) without forgetting the file', async () => {
    const c = await openCache();
    const { d } = await storedChunk(c, 200_000);
    expect((await slice(c, d, 199_999, 0, 100)).ok).toBe(false);
    expect((await slice(c, d, 200_000, 0, 100)).ok).toBe(true);
  });

  it.each([
    [
      'a byte flipped in place',
      async (f: string) => {
        const b = await readFile(f);
        b[10] = b[10]! ^ 1;
        await writeFile(f, b);
      },
    ],
    ['truncated', async (f: string) => truncate(f, 17)],
    [
      'replaced by another file renamed over it',
      async (f: string) => {
        const b = await readFile(f);
        b[20] = b[20]! ^ 1;
        await writeFile(f + '.x', b);
        await rename(f + '.x', f);
      },
    ],
  ])('a file changed after it was verified (%s) is hashed again and never served', async (_, damage) => {
    const c = await openCache();
    const { data, d } = await storedChunk(c, 256 * 1024);
    expect((await slice(c, d, data.length, 0, 64)).ok).toBe(true);
    await damage(c.paths.chunkFile(d.slice('sha256:'.length)));
    expect((await slice(c, d, data.length, 0, 64)).ok).toBe(false);
    expect(c.hasVerified(d)).toBe(false);
    // the usual load path hashes the file, finds it corrupt and removes it
    expect(await c.get(d)).toBeUndefined();
    expect(c.stats().corrupt).toBe(1);
    expect(c.has(d)).toBe(false);
  });

  it('a small chunk is stamped when written too (no whole-file hash once it left memory)', async () => {
    const c = await openCache();
    const { data, d } = await storedChunk(c, 4 * 1024);
    expect(c.hasVerified(d)).toBe(true);
    const r = await slice(c, d, data.length, 100, 200);
    expect(r.ok).toBe(true);
    expect(r.bytes.equals(data.subarray(100, 200))).toBe(true);
  });

  it('after a restart a file is trusted only once this process hashed it whole', async () => {
    const first = await openCache();
    const data = randomBytes(100_000);
    const d = digestOf(data);
    await first.put(d, data);
    await first.close();
    opened.splice(0);
    const again = await openCache();
    expect(again.hasVerified(d)).toBe(false);
    expect((await slice(again, d, data.length, 0, 10)).ok).toBe(false);
    expect((await again.get(d))?.equals(data)).toBe(true);
    expect(again.hasVerified(d)).toBe(true);
    const r = await slice(again, d, data.length, 50_000, 60_000);
    expect(r.ok).toBe(true);
    expect(r.bytes.equals(data.subarray(50_000, 60_000))).toBe(true);
  });

  it('keeps a bounded number of files open between slice reads and closes them with the cache', async () => {
    const c = await openCache();
    const chunks = Array.from({ length: 40 }, () => randomBytes(200_000));
    for (const data of chunks) await c.put(digestOf(data), data);
    await c.flush();
    const before = await openFds();
    for (let round = 0; round < 2; round++) {
      for (const data of chunks) {
        for (const from of [0, 70_000, 140_000]) {
          const r = await slice(c, digestOf(data), data.length, from, from + 60_000);
          expect(r.ok).toBe(true);
          expect(r.bytes.equals(data.subarray(from, from + 60_000))).toBe(true);
        }
      }
    }
    const during = await openFds();
    expect(during).toBeGreaterThan(before);
    expect(during - before).toBeLessThanOrEqual(16);
    await c.close();
    opened.splice(0);
    expect(await fdsAtMost(before)).toBe(before);
  });

  it('a chunk evicted while its file is kept open is not served, and its handle is closed', async () => {
    // room for one 150 kB chunk file: the second put evicts the first
    const c = await openCache({ maxBytes: 200_000 });
    const first = await storedChunk(c, 150_000);
    expect((await slice(c, first.d, 150_000, 0, 64)).ok).toBe(true);
    const withHandle = await openFds();
    await storedChunk(c, 150_000);
    expect(c.stats().evictions).toBe(1);
    expect(c.hasVerified(first.d)).toBe(false);
    expect((await slice(c, first.d, 150_000, 0, 64)).ok).toBe(false);
    // the evicted file's blocks are not held by a kept handle
    expect(await fdsAtMost(withHandle - 1)).toBe(withHandle - 1);
  });

  it('a file unlinked behind the cache is not served from a kept handle', async () => {
    const c = await openCache();
    const { d, file } = await storedChunk(c, 150_000);
    expect((await slice(c, d, 150_000, 0, 64)).ok).toBe(true);
    await rm(file);
    expect((await slice(c, d, 150_000, 0, 64)).ok).toBe(false);
    expect(c.hasVerified(d)).toBe(false);
  });
});

describe('stampOf', () => {
  const stat = (over: Partial<Record<'dev' | 'ino' | 'size' | 'ctimeNs' | 'mtimeNs', bigint>> = {}) =>
    ({
      dev: 2049n,
      ino: 123456n,
      size: 4194304n,
      ctimeNs: 1795895535216100302n,
      mtimeNs: 1795895535216100302n,
      ...over,
    }) as never;

  it('is equal for equal stats and differs when any field moves, by one unit or past 32 bits', () => {
    const base = stampOf(stat());
    expect(stampOf(stat())).toBe(base);
    for (const k of ['dev', 'ino', 'size', 'ctimeNs', 'mtimeNs'] as const) {
      const v = (stat() as unknown as Record<string, bigint>)[k]!;
      expect(stampOf(stat({ [k]: v + 1n }))).not.toBe(base);
      expect(stampOf(stat({ [k]: v + (1n << 40n) }))).not.toBe(base);
    }
    // times before 1970 are negative
    expect(stampOf(stat({ ctimeNs: -5n }))).not.toBe(stampOf(stat({ ctimeNs: 5n })));
  });

  it('a field beyond 64 bits is spelled out and never equals a packed stamp', () => {
    const huge = stampOf(stat({ ino: 1n << 70n }));
    expect(huge).toContain(String(1n << 70n));
    expect(huge).not.toBe(stampOf(stat()));
    expect(stampOf(stat())).toHaveLength(40);
  });
});
