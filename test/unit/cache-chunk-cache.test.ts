import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, truncate, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkCache, footprint } from '../../src/cache/index.js';
import { isStoreError } from '../../src/util/errors.js';

function digestOf(buf: Buffer): string {
  return 'sha256:' + createHash('sha256').update(buf).digest('hex');
}

function chunkPath(root: string, digest: string): string {
  const hex = digest.slice('sha256:'.length);
  return join(root, 'cache', 'chunks', 'sha256', hex.slice(0, 2), hex);
}

/** Every file under the cache dir with its apparent size and allocated bytes (independent of the index). */
async function diskUsage(root: string): Promise<{ files: number; apparent: number; allocated: number }> {
  let files = 0;
  let apparent = 0;
  let allocated = 0;
  const walk = async (dir: string): Promise<void> => {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return;
    }
    for (const n of names) {
      const p = join(dir, n);
      let st;
      try {
        st = await stat(p);
      } catch {
        continue;
      }
      if (st.isDirectory()) await walk(p);
      else {
        files++;
        apparent += st.size;
        allocated += st.blocks * 512;
      }
    }
  };
  await walk(join(root, 'cache'));
  return { files, apparent, allocated };
}

/**
 * What a caller hands `put`: the cache owns it from then on and releases it once it drops it
 * (ChunkCache.retire), so a test keeps its own copy to compare against.
 */
const give = (b: Buffer): Buffer => Buffer.from(b);

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'cache-test-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('ChunkCache', () => {
  it('a chunk served whole leaves memory once it can be had again without a fetch', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 1 << 20 });
    try {
      const onDisk = randomBytes(1000);
      await cache.put(digestOf(onDisk), give(onDisk));
      cache.consumed(digestOf(onDisk), 600, false);
      expect(cache.getMemory(digestOf(onDisk))).toBeDefined(); // 400 bytes not served yet
      cache.consumed(digestOf(onDisk), 400, false);
      expect(cache.getMemory(digestOf(onDisk))).toBeUndefined();
      expect((await cache.get(digestOf(onDisk)))?.equals(onDisk)).toBe(true); // from disk

      // kept off disk, its compressed bytes held by the caller: a small one goes at once
      const local = randomBytes(1000);
      await cache.put(digestOf(local), give(local), { disk: false });
      cache.consumed(digestOf(local), 1000, true);
      expect(cache.getMemory(digestOf(local))).toBeUndefined();
      expect(cache.onDisk(digestOf(local))).toBe(false);

      // held nowhere else: written to disk first, and only then gone from memory
      const only = randomBytes(1000);
      await cache.put(digestOf(only), give(only), { disk: false });
      cache.consumed(digestOf(only), 1000, false);
      expect(cache.getMemory(digestOf(only))).toBeDefined();
      await cache.flush();
      await new Promise<void>((r) => setImmediate(r));
      expect(cache.onDisk(digestOf(only))).toBe(true);
      expect(cache.getMemory(digestOf(only))).toBeUndefined();
    } finally {
      await cache.close();
    }
  });

  it('a large chunk served whole is written to disk before its memory copy goes', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 8 << 20 });
    try {
      // kept off disk (its compressed bytes are held locally), but a lost page of it would cost a
      // decode of the whole chunk: written once the reader has it all, then dropped from memory
      // (an unaligned size: written with O_DIRECT, padded to 4 KiB and cut back, util/direct-write.ts)
      const big = randomBytes(1536 * 1024 + 321);
      await cache.put(digestOf(big), give(big), { disk: false });
      expect(cache.onDisk(digestOf(big))).toBe(false);
      cache.consumed(digestOf(big), big.length, true);
      await cache.flush();
      await new Promise<void>((r) => setImmediate(r));
      expect(cache.onDisk(digestOf(big))).toBe(true);
      expect(cache.getMemory(digestOf(big))).toBeUndefined();
      const out = Buffer.alloc(4096);
      expect(await cache.readSlice(digestOf(big), big.length, { from: 8192, to: 12288 }, out, 0)).toBe(true);
      expect(out.equals(big.subarray(8192, 12288))).toBe(true);
      const tail = Buffer.alloc(1000);
      expect(
        await cache.readSlice(
          digestOf(big),
          big.length,
          { from: big.length - 1000, to: big.length },
          tail,
          0,
        ),
      ).toBe(true);
      expect(tail.equals(big.subarray(big.length - 1000))).toBe(true);
      expect((await cache.get(digestOf(big)))?.equals(big)).toBe(true);
    } finally {
      await cache.close();
    }
  });

  it('a chunk the disk refused stays in memory however much of it was served', async () => {
    // a disk bound smaller than one chunk file: the write is skipped, memory is the only copy
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, maxBytes: 1, memoryBytes: 1 << 20 });
    try {
      const data = randomBytes(10_000);
      const put = cache.put(digestOf(data), give(data));
      cache.consumed(digestOf(data), data.length, false); // served while its write runs
      await put;
      await cache.flush();
      expect(cache.stats().writeSkips).toBe(1);
      expect(cache.getMemory(digestOf(data))?.equals(data)).toBe(true);
    } finally {
      await cache.close();
    }
  });

  it('memory entries unused for memoryIdleMs leave once their chunk is on disk; used or memory-only ones stay', async () => {
    let now = 0;
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryIdleMs: 1000, now: () => now });
    const onDisk = randomBytes(5000);
    const used = randomBytes(6000);
    const memoryOnly = randomBytes(7000);
    await cache.put(digestOf(onDisk), give(onDisk));
    await cache.put(digestOf(used), give(used));
    expect(await cache.put(digestOf(memoryOnly), give(memoryOnly), { disk: false })).toBe(true);
    now = 900;
    expect(cache.getMemory(digestOf(used))?.equals(used)).toBe(true); // used 100 ms before the check
    now = 1000;
    cache.dropIdleMemory();
    expect(cache.getMemory(digestOf(onDisk))).toBeUndefined();
    expect(cache.getMemory(digestOf(used))?.equals(used)).toBe(true);
    // its only decoded copy: kept however long unused (the background pass persists it)
    expect(cache.getMemory(digestOf(memoryOnly))?.equals(memoryOnly)).toBe(true);
    // the dropped one is still served, from its file, without a fetch
    expect((await cache.get(digestOf(onDisk)))?.equals(onDisk)).toBe(true);
    await cache.close();
    expect(cache.dropIdleMemory()).toBe(0); // closed: nothing more happens
  });

  it('stores a chunk content-addressed, mode 0600, byte-exact, and serves it back', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const data = randomBytes(100_000);
    const digest = digestOf(data);
    await cache.put(digest, give(data));
    const file = chunkPath(root, digest);
    const st = await stat(file);
    expect(st.mode & 0o777).toBe(0o600);
    // the file itself holds exactly the chunk (read from disk, not through the cache)
    expect((await readFile(file)).equals(data)).toBe(true);
    expect((await cache.get(digest))?.equals(data)).toBe(true);
    cache.dropMemory();
    expect((await cache.get(digest))?.equals(data)).toBe(true);
    expect(cache.stats().diskHits).toBe(1);
    await cache.close();
  });

  it('a put without memory (background pass) goes to disk only and leaves the memory LRU alone', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const hot = randomBytes(1000);
    await cache.put(digestOf(hot), give(hot));
    const cold = randomBytes(100_000);
    const digest = digestOf(cold);
    const writing = cache.put(digest, give(cold), { memory: false });
    // present while its write runs: nobody fetches or decodes it again meanwhile
    expect(cache.has(digest)).toBe(true);
    // written, not kept: the caller may release the buffer
    expect(await writing).toBe(false);
    expect(cache.getMemory(digest)).toBeUndefined();
    expect(cache.getMemory(digestOf(hot))?.equals(hot)).toBe(true);
    expect((await readFile(chunkPath(root, digest))).equals(cold)).toBe(true);
    expect((await cache.get(digest))?.equals(cold)).toBe(true);
    await cache.close();
  });

  it('a put without disk stays in memory only, unless the LRU cannot keep it; persist() writes it later', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 1 << 20 });
    const small = randomBytes(10_000);
    // kept by the memory LRU: the caller must not release it
    expect(await cache.put(digestOf(small), give(small), { disk: false })).toBe(true);
    expect(cache.onDisk(digestOf(small))).toBe(false);
    // larger than a quarter of the LRU: not kept in memory, so written all the same
    const large = randomBytes(300_000);
    await cache.put(digestOf(large), give(large), { disk: false });
    expect(cache.onDisk(digestOf(large))).toBe(true);
    const hits = cache.stats().memoryHits;
    expect(await cache.persist(digestOf(small), small.length)).toBe(true);
    expect((await readFile(chunkPath(root, digestOf(small)))).equals(small)).toBe(true);
    // nobody read it: not a memory hit
    expect(cache.stats().memoryHits).toBe(hits);
    expect(await cache.persist(digestOf(randomBytes(8)), 8)).toBe(false);
    await cache.close();
  });

  it('stores an identical chunk once', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const data = randomBytes(5000);
    const digest = digestOf(data);
    await Promise.all([
      cache.put(digest, give(data)),
      cache.put(digest, Buffer.from(data)),
      cache.put(digest, give(data)),
    ]);
    await cache.put(digest, give(data));
    const usage = await diskUsage(root);
    expect(usage.files).toBe(1);
    expect(cache.stats().writes).toBe(1);
    await cache.close();
  });

  it('a new instance on the same root serves chunks written by the previous one', async () => {
    const first = await ChunkCache.open({ root, minFreeBytes: 0 });
    const chunks = Array.from({ length: 20 }, () => randomBytes(3000 + Math.floor(Math.random() * 5000)));
    for (const c of chunks) await first.put(digestOf(c), give(c));
    await first.close();

    const second = await ChunkCache.open({ root, minFreeBytes: 0 });
    // open() does not wait for the scan, and a get during the scan still finds the file
    expect(second.stats().scanComplete).toBe(false);
    expect((await second.get(digestOf(chunks[0]!)))?.equals(chunks[0]!)).toBe(true);
    await second.whenScanned();
    expect(second.stats().diskEntries).toBe(20);
    for (const c of chunks) expect((await second.get(digestOf(c)))?.equals(c)).toBe(true);
    expect(await second.get(digestOf(Buffer.from('never stored')))).toBeUndefined();
    await second.close();
  });

  it.each([
    [
      'flipped byte',
      async (file: string) => {
        const b = await readFile(file);
        const mid = b.length >> 1;
        b[mid] = b[mid]! ^ 0xff;
        await writeFile(file, b);
      },
    ],
    ['torn (truncated) write', async (file: string) => truncate(file, 1000)],
    ['empty file', async (file: string) => truncate(file, 0)],
  ])('detects a %s, deletes the file and reports a miss', async (_name, damage) => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const data = randomBytes(300_000);
    const digest = digestOf(data);
    await cache.put(digest, give(data));
    await cache.close();
    const file = chunkPath(root, digest);
    await damage(file);

    const again = await ChunkCache.open({ root, minFreeBytes: 0 });
    await again.whenScanned();
    expect(await again.get(digest)).toBeUndefined();
    await expect(stat(file)).rejects.toMatchObject({ code: 'ENOENT' });
    expect(again.stats().corrupt).toBe(1);
    // refetch path: putting the good bytes again works
    await again.put(digest, give(data));
    again.dropMemory();
    expect((await again.get(digest))?.equals(data)).toBe(true);
    await again.close();
  });

  it('removes temp files left by a crashed process at start-up', async () => {
    await mkdir(join(root, 'cache', 'tmp'), { recursive: true });
    await writeFile(join(root, 'cache', 'tmp', '999-deadbeef-0'), randomBytes(10));
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    await cache.whenScanned();
    expect(await readdir(join(root, 'cache', 'tmp'))).toEqual([]);
    await cache.close();
  });

  it('rejects digests that are not sha256:<hex> (no path can be derived from a hostile TOC)', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    for (const bad of ['sha256:../../etc/passwd', 'md5:abc', 'sha256:' + 'A'.repeat(64), '']) {
      let caught: unknown;
      try {
        await cache.put(bad, Buffer.from('x'));
      } catch (err) {
        caught = err;
      }
      expect(isStoreError(caught, 'E_INVALID_ARGUMENT')).toBe(true);
      await expect(cache.get(bad)).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    }
    expect((await diskUsage(root)).files).toBe(0);
    await cache.close();
  });

  it('keeps disk usage within maxBytes by evicting least recently used chunks', async () => {
    const size = 64 * 1024;
    const maxBytes = 10 * footprint(size);
    const cache = await ChunkCache.open({ root, maxBytes, minFreeBytes: 0, memoryBytes: 1 });
    const chunks = Array.from({ length: 40 }, () => randomBytes(size));
    let peak = 0;
    for (let i = 0; i < chunks.length; i++) {
      await cache.put(digestOf(chunks[i]!), chunks[i]!);
      // keep chunk 0 hot: it must survive
      expect((await cache.get(digestOf(chunks[0]!)))?.equals(chunks[0]!)).toBe(true);
      const u = await diskUsage(root);
      peak = Math.max(peak, u.allocated);
      expect(u.apparent).toBeLessThanOrEqual(maxBytes);
    }
    expect(peak).toBeLessThanOrEqual(maxBytes);
    const st = cache.stats();
    expect(st.diskBytes).toBeLessThanOrEqual(maxBytes);
    expect(st.evictions).toBeGreaterThanOrEqual(30);
    expect(await cache.get(digestOf(chunks[0]!))).toBeDefined();
    expect(await cache.get(digestOf(chunks[1]!))).toBeUndefined();
    expect((await cache.get(digestOf(chunks[39]!)))?.equals(chunks[39]!)).toBe(true);
    await cache.close();
  });

  it('keeps the bound under concurrent puts', async () => {
    const size = 32 * 1024;
    const maxBytes = 8 * footprint(size);
    const cache = await ChunkCache.open({ root, maxBytes, minFreeBytes: 0, memoryBytes: 1 });
    let peak = 0;
    let done = false;
    const sampler = (async () => {
      while (!done) {
        peak = Math.max(peak, (await diskUsage(root)).apparent);
        await new Promise((r) => setTimeout(r, 1));
      }
    })();
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        const c = randomBytes(size);
        await cache.put(digestOf(c), give(c));
      }),
    );
    done = true;
    await sampler;
    await cache.flush();
    expect(peak).toBeLessThanOrEqual(maxBytes);
    expect((await diskUsage(root)).apparent).toBeLessThanOrEqual(maxBytes);
    await cache.close();
  });

  it('never evicts pinned chunks; unpinned they become evictable again', async () => {
    const size = 16 * 1024;
    const maxBytes = 6 * footprint(size);
    const cache = await ChunkCache.open({ root, maxBytes, minFreeBytes: 0, memoryBytes: 1 });
    const onDisk = async (c: Buffer): Promise<boolean> =>
      (await stat(chunkPath(root, digestOf(c))).catch(() => undefined)) !== undefined;
    const pinned = Array.from({ length: 4 }, () => randomBytes(size));
    cache.pin('layerA', pinned.map(digestOf));
    expect(cache.isPinned('layerA')).toBe(true);
    // the pinned chunks are written first, so they are the least recently used of all
    for (const c of pinned) await cache.put(digestOf(c), give(c));
    for (let i = 0; i < 30; i++) {
      const c = randomBytes(size);
      await cache.put(digestOf(c), give(c));
      await cache.flush();
      // after every single eviction round, every pinned file is still there (checked on disk)
      for (const p of pinned) expect(await onDisk(p), `pinned chunk after put ${i}`).toBe(true);
    }
    expect(cache.stats().evictions).toBeGreaterThanOrEqual(30 - 2);
    expect(cache.stats().pinnedEntries).toBe(pinned.length);
    for (const c of pinned) expect((await cache.get(digestOf(c)))?.equals(c)).toBe(true);
    expect((await diskUsage(root)).apparent).toBeLessThanOrEqual(maxBytes);
    cache.unpin('layerA');
    expect(cache.isPinned('layerA')).toBe(false);
    expect(cache.stats().pinnedEntries).toBe(0);
    for (let i = 0; i < 10; i++) {
      const c = randomBytes(size);
      await cache.put(digestOf(c), give(c));
    }
    await cache.flush();
    // unpinned, every one of them went the LRU way (10 newer chunks, room for 6)
    for (const p of pinned) expect(await onDisk(p)).toBe(false);
    for (const p of pinned) expect(await cache.get(digestOf(p))).toBeUndefined();
    await cache.close();
  });

  it('bounds the number of index entries', async () => {
    const cache = await ChunkCache.open({ root, maxEntries: 5, minFreeBytes: 0, memoryBytes: 1 });
    for (let i = 0; i < 12; i++) {
      const c = randomBytes(100);
      await cache.put(digestOf(c), give(c));
    }
    await cache.flush();
    expect(cache.stats().diskEntries).toBe(5);
    expect((await diskUsage(root)).files).toBe(5);
    await cache.close();
  });

  it('writes nothing to disk when the free-space margin cannot be kept', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: Number.MAX_SAFE_INTEGER });
    const c = randomBytes(1000);
    await cache.put(digestOf(c), give(c));
    expect((await diskUsage(root)).files).toBe(0);
    expect(cache.stats().writeSkips).toBe(1);
    // still served from memory
    expect((await cache.get(digestOf(c)))?.equals(c)).toBe(true);
    await cache.close();
  });

  it('after a restart with a smaller bound, evicts the oldest (by mtime) down to the bound', async () => {
    const size = 8 * 1024;
    const first = await ChunkCache.open({ root, minFreeBytes: 0 });
    const chunks = Array.from({ length: 12 }, () => randomBytes(size));
    for (const c of chunks) await first.put(digestOf(c), give(c));
    await first.close();
    // give each file a distinct age: chunk i is i minutes old -> chunk 0 is the newest
    const now = Date.now() / 1000;
    for (let i = 0; i < chunks.length; i++) {
      const t = now - 60 * i;
      await utimes(chunkPath(root, digestOf(chunks[i]!)), t, t);
    }
    const second = await ChunkCache.open({ root, maxBytes: 4 * footprint(size), minFreeBytes: 0 });
    await second.whenScanned();
    await second.flush();
    expect((await diskUsage(root)).files).toBe(4);
    for (let i = 0; i < 4; i++) expect(await second.get(digestOf(chunks[i]!))).toBeDefined();
    await second.close();
  });

  it('bounds the memory LRU in bytes', async () => {
    const cache = await ChunkCache.open({ root, memoryBytes: 100_000, minFreeBytes: 0 });
    for (let i = 0; i < 50; i++) {
      const c = randomBytes(10_000);
      await cache.put(digestOf(c), give(c));
      expect(cache.stats().memoryBytes).toBeLessThanOrEqual(100_000);
    }
    expect(cache.stats().memoryEntries).toBe(10);
    await cache.close();
  });
});

describe('ChunkCache memory: only the chunk bytes stay alive', () => {
  it('a small chunk cut from a shared slab or a big decode buffer is kept as an exact-size copy', async () => {
    const root = await mkdtemp(join(tmpdir(), 'chunk-cache-own-'));
    try {
      const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
      const big = randomBytes(1 << 20);
      const views = [Buffer.from('small file contents'), big.subarray(4096, 4096 + 1000)];
      for (const v of views) {
        const digest = 'sha256:' + createHash('sha256').update(v).digest('hex');
        await cache.put(digest, v);
        const kept = cache.getMemory(digest)!;
        expect(kept.equals(v)).toBe(true);
        expect(kept.buffer.byteLength).toBe(v.length);
      }
      // a buffer that is (almost) all chunk is kept as is, no copy
      const whole = randomBytes(100_000);
      const d = 'sha256:' + createHash('sha256').update(whole).digest('hex');
      await cache.put(d, whole);
      expect(cache.getMemory(d)).toBe(whole);
      await cache.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

  it('a buffer that left the memory LRU is released at the next turn of the event loop, not within this one', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    try {
      const data = randomBytes(100_000);
      const handed = give(data);
      await cache.put(digestOf(data), handed);
      cache.consumed(digestOf(data), data.length, false); // read to its end, and on disk: it leaves
      expect(cache.getMemory(digestOf(data))).toBeUndefined();
      // a FUSE answer copying out of a view of it in this turn still reads its bytes
      expect(handed.equals(data)).toBe(true);
      await turn();
      expect(handed.length).toBe(0); // its memory is back; no view reads other bytes
      expect((await cache.get(digestOf(data)))?.equals(data)).toBe(true); // served from its file
    } finally {
      await cache.close();
    }
  });

  it('a buffer the LRU holds again, or that a disk write may still read, is not released then', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 1 << 20 });
    try {
      // put twice: the entry is replaced by one holding the same buffer
      const again = randomBytes(50_000);
      const kept = give(again);
      await cache.put(digestOf(again), kept);
      await cache.put(digestOf(again), kept);
      await turn();
      expect(cache.getMemory(digestOf(again))).toBe(kept);
      expect(kept.equals(again)).toBe(true);

      // evicted while its disk write runs: released only once the write is done
      const writing = randomBytes(200_000);
      const w = give(writing);
      const writesBefore = cache.stats().writes;
      const put = cache.put(digestOf(writing), w);
      for (let i = 0; i < 5; i++)
        void cache.put(digestOf(Buffer.from([i])), randomBytes(200_000), { disk: false });
      expect(cache.getMemory(digestOf(writing))).toBeUndefined(); // evicted at once
      await turn();
      expect(cache.stats().writes).toBe(writesBefore); // its write has more than one turn of work left
      expect(w.equals(writing)).toBe(true);
      await put;
      await cache.flush();
      await turn();
      expect(w.length).toBe(0);
      expect((await cache.get(digestOf(writing)))?.equals(writing)).toBe(true);
    } finally {
      await cache.close();
    }
  });
});
