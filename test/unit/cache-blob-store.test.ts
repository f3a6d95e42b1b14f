import { createHash, randomBytes } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BlobFileHandle, BlobFs, DiskBudget } from '../../src/cache/blob-files.js';
import { BlobStore } from '../../src/cache/blob-store.js';
import type { CompressedBytesSink, LocalCompressedBytes } from '../../src/layer/compressed-store.js';
import { ChunkCache } from '../../src/cache/index.js';
import { captureLogger } from '../helpers/registry-log-capture.js';

const digestOf = (b: Buffer): string => 'sha256:' + createHash('sha256').update(b).digest('hex');
const hexOf = (d: string): string => d.slice('sha256:'.length);

let root: string;
beforeEach(async () => {
  root = await fsp.mkdtemp(join(tmpdir(), 'blob-store-'));
});
afterEach(async () => {
  await fsp.rm(root, { recursive: true, force: true });
});

const dir = (): string => join(root, 'blobs', 'sha256');

/** The real file system, with some calls of the blob's file handle replaced (fault injection). */
function handleFs(wrap: (fh: fsp.FileHandle) => Partial<BlobFileHandle>): BlobFs {
  return {
    open: async (path, flags, mode) => {
      const fh = await fsp.open(path, flags, mode);
      return {
        write: (buf, off, len, pos) => fh.write(buf, off, len, pos),
        read: (buf, off, len, pos) => fh.read(buf, off, len, pos),
        datasync: () => fh.datasync(),
        stat: () => fh.stat(),
        close: () => fh.close(),
        ...wrap(fh),
      };
    },
    readFile: (p) => fsp.readFile(p),
    rename: (a, b) => fsp.rename(a, b),
    unlink: (p) => fsp.unlink(p),
    mkdir: (p, o) => fsp.mkdir(p, o),
    readdir: (p) => fsp.readdir(p),
  };
}

/** A budget with a fixed limit that records what it granted. */
function fixedBudget(limit: number): DiskBudget & { used: number } {
  const b = {
    used: 0,
    reserve(bytes: number): boolean {
      if (b.used + bytes > limit) return false;
      b.used += bytes;
      return true;
    },
    release(bytes: number): void {
      b.used -= bytes;
    },
  };
  return b;
}

describe('BlobStore: writes and reads', () => {
  it('overlapping and repeated writes store every byte once and read back exactly', async () => {
    const blob = randomBytes(300_000);
    const store = await BlobStore.open({ root });
    const b = await store.openBlob(digestOf(blob), blob.length);
    const pieces = [
      [0, 100_000],
      [50_000, 150_000],
      [0, 200_000],
      [120_000, 130_000],
      [250_000, 300_000],
    ] as const;
    const stored = await Promise.all(pieces.map(([s, e]) => b.write(s, blob.subarray(s, e))));
    expect(stored.reduce((a, n) => a + n, 0)).toBe(250_000);
    expect(store.stats().bytesWritten).toBe(250_000);
    expect(b.coverage()).toEqual([
      { start: 0, end: 200_000 },
      { start: 250_000, end: 300_000 },
    ]);
    expect(b.covered(10, 199_990)).toBe(true);
    expect(b.covered(199_999, 2)).toBe(false);
    expect(b.missing(0, 300_000)).toEqual([{ start: 200_000, end: 250_000 }]);
    expect(b.missing(260_000, 1_000_000)).toEqual([]);
    expect(b.complete).toBe(false);
    expect((await b.read(0, 200_000)).equals(blob.subarray(0, 200_000))).toBe(true);
    expect((await b.read(260_000, 40_000)).equals(blob.subarray(260_000))).toBe(true);
    await expect(b.read(199_000, 2000)).rejects.toMatchObject({ code: 'E_NOT_FOUND' });
    expect(await b.write(0, blob.subarray(0, 200_000))).toBe(0);
    expect(await b.write(200_000, blob.subarray(200_000, 250_000))).toBe(50_000);
    expect(b.complete).toBe(true);
    expect(b.bytesCovered).toBe(blob.length);
    // same instance for the same digest; another size is refused
    expect(await store.openBlob(digestOf(blob), blob.length)).toBe(b);
    await expect(store.openBlob(digestOf(blob), 5)).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    await store.close();
  });

  it('refuses bad digests and ranges outside the blob with typed errors', async () => {
    const store = await BlobStore.open({ root });
    await expect(store.openBlob('sha256:../../etc/passwd', 10)).rejects.toMatchObject({
      code: 'E_INVALID_ARGUMENT',
    });
    await expect(store.openBlob(digestOf(Buffer.from('x')), -1)).rejects.toMatchObject({
      code: 'E_INVALID_ARGUMENT',
    });
    const b = await store.openBlob(digestOf(Buffer.from('abc')), 3);
    await expect(b.write(2, Buffer.from('xy'))).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    await expect(b.read(-1, 1)).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    await store.close();
  });

  it('random concurrent writes: coverage equals the union written, bytes equal the blob (property)', async () => {
    const size = 5000;
    const blob = randomBytes(size);
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc
            .tuple(fc.integer({ min: 0, max: size }), fc.integer({ min: 0, max: size }))
            .map(([a, c]) => [Math.min(a, c), Math.max(a, c)] as const),
          { maxLength: 12 },
        ),
        async (writes) => {
          const r = join(root, `p${run++}`);
          const store = await BlobStore.open({ root: r, durable: false });
          const b = await store.openBlob(digestOf(blob), size);
          const stored = await Promise.all(writes.map(([s, e]) => b.write(s, blob.subarray(s, e))));
          const bits = new Array<boolean>(size).fill(false);
          for (const [s, e] of writes) bits.fill(true, s, e);
          const count = bits.filter(Boolean).length;
          expect(stored.reduce((a, n) => a + n, 0)).toBe(count);
          expect(b.bytesCovered).toBe(count);
          for (const iv of b.coverage()) {
            expect((await b.read(iv.start, iv.end - iv.start)).equals(blob.subarray(iv.start, iv.end))).toBe(
              true,
            );
          }
          for (const m of b.missing(0, size))
            for (let i = m.start; i < m.end; i++) expect(bits[i]).toBe(false);
          await store.close();
          // and the same after a reopen
          const again = await BlobStore.open({ root: r, durable: false });
          expect((await again.openBlob(digestOf(blob), size)).bytesCovered).toBe(count);
          await again.close();
        },
      ),
      { numRuns: 25 },
    );
  });
});

describe('BlobStore: restart and crash safety', () => {
  it('coverage and bytes persist across close and reopen', async () => {
    const blob = randomBytes(100_000);
    const d = digestOf(blob);
    let store = await BlobStore.open({ root });
    let b = await store.openBlob(d, blob.length);
    await b.write(10_000, blob.subarray(10_000, 40_000));
    await b.write(70_000, blob.subarray(70_000, 80_000));
    await store.close();
    store = await BlobStore.open({ root });
    expect(store.list()).toEqual([d]);
    b = await store.openBlob(d, blob.length);
    expect(b.coverage()).toEqual([
      { start: 10_000, end: 40_000 },
      { start: 70_000, end: 80_000 },
    ]);
    expect((await b.read(10_000, 30_000)).equals(blob.subarray(10_000, 40_000))).toBe(true);
    await store.close();
  });

  it('a crash after data but before the record: the lost range is refetched, never served', async () => {
    const blob = randomBytes(64 * 1024);
    const d = digestOf(blob);
    // no timer, no byte threshold: only explicit flushes record coverage
    const first = await BlobStore.open({ root, checkpointBytes: 1e12, checkpointMs: 1e9 });
    const b1 = await first.openBlob(d, blob.length);
    await b1.write(0, blob.subarray(0, 20_000));
    await b1.flush();
    await b1.write(20_000, blob.subarray(20_000, 50_000));
    // "crash": the first process never closes; a second one opens the same root
    const second = await BlobStore.open({ root });
    const b2 = await second.openBlob(d, blob.length);
    expect(b2.coverage()).toEqual([{ start: 0, end: 20_000 }]);
    expect(b2.missing(0, blob.length)).toEqual([{ start: 20_000, end: blob.length }]);
    expect((await b2.read(0, 20_000)).equals(blob.subarray(0, 20_000))).toBe(true);
    await expect(b2.read(20_000, 1)).rejects.toMatchObject({ code: 'E_NOT_FOUND' });
    await second.close();
  });

  it('an older record restored over a newer one (torn checkpoint) only costs a refetch', async () => {
    const blob = randomBytes(50_000);
    const d = digestOf(blob);
    const record = join(dir(), `${hexOf(d)}.coverage`);
    let store = await BlobStore.open({ root });
    let b = await store.openBlob(d, blob.length);
    await b.write(0, blob.subarray(0, 10_000));
    await b.flush();
    const old = await fsp.readFile(record);
    await b.write(10_000, blob.subarray(10_000, 50_000));
    expect(b.complete).toBe(true);
    await store.close();
    await fsp.writeFile(record, old);
    store = await BlobStore.open({ root });
    b = await store.openBlob(d, blob.length);
    expect(b.coverage()).toEqual([{ start: 0, end: 10_000 }]);
    expect(b.complete).toBe(false);
    // what is written again is stored again (the stale bytes underneath are the same anyway)
    expect(await b.write(10_000, blob.subarray(10_000))).toBe(40_000);
    expect((await b.read(0, blob.length)).equals(blob)).toBe(true);
    await store.close();
  });

  it.each([
    ['garbage', Buffer.from('{"v":1,"digest":')],
    ['empty', Buffer.alloc(0)],
    ['interval past the end', null],
    ['another digest', 'other'],
  ] as const)('a bad record (%s) means nothing is stored', async (_what, content) => {
    const blob = randomBytes(10_000);
    const d = digestOf(blob);
    const record = join(dir(), `${hexOf(d)}.coverage`);
    let store = await BlobStore.open({ root });
    const b0 = await store.openBlob(d, blob.length);
    await b0.write(0, blob);
    await store.close();
    const parsed = JSON.parse(await fsp.readFile(record, 'utf8')) as {
      intervals: number[][];
      digest: string;
    };
    if (content === null) parsed.intervals = [[0, blob.length + 1]];
    if (content === 'other') parsed.digest = digestOf(Buffer.from('other'));
    await fsp.writeFile(
      record,
      typeof content === 'object' && content !== null ? content : JSON.stringify(parsed),
    );
    store = await BlobStore.open({ root });
    // the scan dropped the pair; the blob starts empty
    expect(store.list()).toEqual([]);
    const b = await store.openBlob(d, blob.length);
    expect(b.bytesCovered).toBe(0);
    expect(b.missing(0, blob.length)).toEqual([{ start: 0, end: blob.length }]);
    await store.close();
  });

  it('a record for another size is discarded and its bytes released from the budget', async () => {
    const blob = randomBytes(20_000);
    const d = digestOf(blob);
    let store = await BlobStore.open({ root });
    await (await store.openBlob(d, blob.length)).write(0, blob);
    await store.close();
    const budget = fixedBudget(1e9);
    store = await BlobStore.open({ root, budget });
    expect(budget.used).toBeGreaterThanOrEqual(20_000);
    const b = await store.openBlob(d, 30_000);
    expect(b.bytesCovered).toBe(0);
    expect(budget.used).toBe(0);
    expect(store.stats().diskBytes).toBe(0);
    await store.close();
  });

  it('a data file shorter than its record (changed behind our back) is clipped, not served', async () => {
    const blob = randomBytes(30_000);
    const d = digestOf(blob);
    let store = await BlobStore.open({ root });
    const b0 = await store.openBlob(d, blob.length);
    await b0.write(0, blob);
    await store.close();
    await fsp.truncate(join(dir(), `${hexOf(d)}.partial`), 12_000);
    store = await BlobStore.open({ root });
    const b = await store.openBlob(d, blob.length);
    expect(b.coverage()).toEqual([{ start: 0, end: 12_000 }]);
    await store.close();
  });

  it('the start-up scan removes temp records and unpaired files, and accounts the rest', async () => {
    const blob = randomBytes(20_000);
    const d = digestOf(blob);
    let store = await BlobStore.open({ root });
    await (await store.openBlob(d, blob.length)).write(0, blob);
    await store.close();
    const lone = 'ab'.repeat(32);
    await fsp.writeFile(join(dir(), `${lone}.partial`), 'x');
    await fsp.writeFile(join(dir(), `${'cd'.repeat(32)}.coverage`), '{}');
    await fsp.writeFile(join(dir(), `${hexOf(d)}.coverage.1234.tmp`), 'half');
    const budget = fixedBudget(1e9);
    store = await BlobStore.open({ root, budget });
    expect((await fsp.readdir(dir())).sort()).toEqual([`${hexOf(d)}.coverage`, `${hexOf(d)}.partial`]);
    expect(store.stats().blobs).toBe(1);
    expect(budget.used).toBeGreaterThanOrEqual(20_000);
    expect(store.stats().diskBytes).toBe(budget.used);
    await store.remove(d);
    expect(budget.used).toBe(0);
    expect(await fsp.readdir(dir())).toEqual([]);
    await store.close();
    // a budget too small for what is on disk: the blob is deleted at start
    store = await BlobStore.open({ root });
    await (await store.openBlob(d, blob.length)).write(0, blob);
    await store.close();
    store = await BlobStore.open({ root, budget: fixedBudget(100) });
    expect(store.list()).toEqual([]);
    expect(await fsp.readdir(dir())).toEqual([]);
    await store.close();
  });
});

describe('BlobStore: bounds and disk errors', () => {
  it('stores only what the budget grants and gives it back on remove', async () => {
    const blob = randomBytes(100_000);
    const budget = fixedBudget(60_000);
    const store = await BlobStore.open({ root, budget });
    const b = await store.openBlob(digestOf(blob), blob.length);
    expect(await b.write(0, blob.subarray(0, 40_000))).toBe(40_000);
    expect(await b.write(40_000, blob.subarray(40_000, 80_000))).toBe(0);
    expect(b.coverage()).toEqual([{ start: 0, end: 40_000 }]);
    expect(store.stats().bytesRefused).toBe(40_000);
    expect(store.stats().disabled).toBe(false);
    await store.remove(b.digest);
    expect(budget.used).toBe(0);
    await store.close();
  });

  it('blobs left by an earlier run and not opened give way to blobs being fetched', async () => {
    const old = randomBytes(30_000);
    let store = await BlobStore.open({ root });
    await (await store.openBlob(digestOf(old), old.length)).write(0, old);
    await store.close();
    const budget = fixedBudget(50_000);
    store = await BlobStore.open({ root, budget });
    expect(store.list()).toEqual([digestOf(old)]);
    const now = randomBytes(30_000);
    const b = await store.openBlob(digestOf(now), now.length);
    expect(await b.write(0, now)).toBe(now.length);
    expect(store.list()).toEqual([digestOf(now)]);
    expect(store.stats().bytesRefused).toBe(0);
    // an open blob never gives way: a second one is refused
    const other = randomBytes(30_000);
    expect(await (await store.openBlob(digestOf(other), other.length)).write(0, other)).toBe(0);
    expect(b.complete).toBe(true);
    await store.close();
  });

  it('shares the chunk cache bounds: reserving evicts unpinned chunks, refusing when pinned ones fill it', async () => {
    const cache = await ChunkCache.open({ root, maxBytes: 64 * 1024, minFreeBytes: 0 });
    await cache.whenScanned();
    const chunks = [randomBytes(16 * 1024), randomBytes(16 * 1024), randomBytes(16 * 1024)];
    for (const c of chunks) await cache.put(digestOf(c), c);
    expect(cache.stats().diskEntries).toBe(3);
    const budget: DiskBudget = {
      reserve: (n) => cache.reserveExternal(n),
      release: (n) => cache.releaseExternal(n),
    };
    const store = await BlobStore.open({ root, budget });
    const blob = randomBytes(30 * 1024);
    const b = await store.openBlob(digestOf(blob), blob.length);
    expect(await b.write(0, blob)).toBe(blob.length);
    await cache.flush();
    const st = cache.stats();
    expect(st.externalBytes).toBe(store.stats().diskBytes);
    expect(st.diskBytes + st.externalBytes).toBeLessThanOrEqual(64 * 1024);
    expect(st.diskEntries).toBeLessThan(3);
    // everything left pinned: a new blob cannot take the space
    cache.pin('layer', chunks.map(digestOf));
    const other = randomBytes(40 * 1024);
    const b2 = await store.openBlob(digestOf(other), other.length);
    expect(await b2.write(0, other)).toBe(0);
    await store.remove(b.digest);
    expect(cache.stats().externalBytes).toBe(store.stats().diskBytes);
    await store.close();
    await cache.close();
  });

  it('the chunk cache refuses external bytes below its free-space margin', async () => {
    const cache = await ChunkCache.open({ root, minFreeBytes: Number.MAX_SAFE_INTEGER });
    await cache.whenScanned();
    expect(await cache.reserveExternal(4096)).toBe(false);
    expect(cache.stats().externalBytes).toBe(0);
    await cache.close();
  });

  it('ENOSPC: stops storing, warns once, keeps serving stored bytes; storing resumes after a remove', async () => {
    let full = false;
    let writesTried = 0;
    const failingFs = handleFs((fh) => ({
      write: async (buf, off, len, pos) => {
        writesTried++;
        if (full)
          throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
        return await fh.write(buf, off, len, pos);
      },
    }));
    const { logger, text } = captureLogger();
    const store = await BlobStore.open({
      root,
      fs: failingFs,
      logger,
      checkpointBytes: 1e12,
      checkpointMs: 1e9,
    });
    const blob = randomBytes(40_000);
    const b = await store.openBlob(digestOf(blob), blob.length);
    expect(await b.write(0, blob.subarray(0, 10_000))).toBe(10_000);
    full = true;
    expect(await b.write(10_000, blob.subarray(10_000, 20_000))).toBe(0);
    const tried = writesTried;
    expect(await b.write(20_000, blob.subarray(20_000, 30_000))).toBe(0);
    expect(writesTried).toBe(tried); // disabled: no further attempt
    expect(store.stats()).toMatchObject({ disabled: true, writeErrors: 1 });
    expect(text().match(/storing stopped/g)?.length).toBe(1);
    expect(text()).toContain('ENOSPC');
    // still serving what it has
    expect((await b.read(0, 10_000)).equals(blob.subarray(0, 10_000))).toBe(true);
    expect(b.missing(0, blob.length)).toEqual([{ start: 10_000, end: blob.length }]);
    // a blob removed frees space: storing is back on
    full = false;
    const other = randomBytes(1000);
    const o = await store.openBlob(digestOf(other), other.length);
    await store.remove(o.digest);
    expect(store.stats().disabled).toBe(false);
    expect(await b.write(10_000, blob.subarray(10_000))).toBe(30_000);
    expect((await b.read(0, blob.length)).equals(blob)).toBe(true);
    await store.close();
  });

  it('a failing checkpoint leaves the old record (coverage lags, never leads)', async () => {
    let failRename = false;
    const fs: BlobFs = {
      open: (p, f, m) => fsp.open(p, f, m),
      readFile: (p) => fsp.readFile(p),
      rename: async (a, b) => {
        if (failRename) throw Object.assign(new Error('ENOSPC'), { code: 'ENOSPC' });
        await fsp.rename(a, b);
      },
      unlink: (p) => fsp.unlink(p),
      mkdir: (p, o) => fsp.mkdir(p, o),
      readdir: (p) => fsp.readdir(p),
    };
    const blob = randomBytes(20_000);
    const d = digestOf(blob);
    const store = await BlobStore.open({ root, fs, checkpointBytes: 1e12, checkpointMs: 1e9 });
    const b = await store.openBlob(d, blob.length);
    await b.write(0, blob.subarray(0, 5000));
    await b.flush();
    failRename = true;
    await b.write(5000, blob.subarray(5000));
    await b.flush();
    expect(store.stats().disabled).toBe(true);
    // no temp file left behind; the record still lists only the first range
    expect((await fsp.readdir(dir())).sort()).toEqual([`${hexOf(d)}.coverage`, `${hexOf(d)}.partial`]);
    const again = await BlobStore.open({ root });
    expect((await again.openBlob(d, blob.length)).coverage()).toEqual([{ start: 0, end: 5000 }]);
    await again.close();
    await store.close();
  });

  it('invalidate forgets a range durably', async () => {
    const blob = randomBytes(10_000);
    const d = digestOf(blob);
    let store = await BlobStore.open({ root });
    const b = await store.openBlob(d, blob.length);
    await b.write(0, blob);
    await b.invalidate(2000, 1000);
    expect(b.missing(0, blob.length)).toEqual([{ start: 2000, end: 3000 }]);
    await store.close();
    store = await BlobStore.open({ root });
    expect((await store.openBlob(d, blob.length)).missing(0, blob.length)).toEqual([
      { start: 2000, end: 3000 },
    ]);
    await store.close();
  });
});

describe('BlobStore: engine seam (localBytes / onCompressedBytes)', () => {
  it('bytes are held from the moment they are handed over: served from memory until written', async () => {
    let release!: () => void;
    let failIt = false;
    const gate = new Promise<void>((r) => (release = r));
    const gatedFs = handleFs((fh) => ({
      write: async (buf, off, len, pos) => {
        await gate;
        if (failIt) throw Object.assign(new Error('ENOSPC'), { code: 'ENOSPC' });
        return await fh.write(buf, off, len, pos);
      },
    }));
    for (const outcome of ['written', 'failed'] as const) {
      const r = join(root, outcome);
      const store = await BlobStore.open({ root: r, fs: gatedFs, durable: false });
      const blob = randomBytes(10_000);
      const b = await store.openBlob(digestOf(blob), blob.length);
      const seam: LocalCompressedBytes = b;
      const sink: CompressedBytesSink = b.onCompressedBytes;
      if (outcome === 'written') {
        // the sink's promise: it reads the bytes handed over until their write is done
        let writeDone = false;
        void sink(2000, blob.subarray(2000, 6000))?.then(() => (writeDone = true));
        expect(seam.covered(2000, 4000)).toBe(true);
        expect(seam.held!(0, 10_000)).toEqual([{ offset: 2000, length: 4000 }]);
        expect(b.missing(0, 10_000)).toEqual([
          { start: 0, end: 2000 },
          { start: 6000, end: 10_000 },
        ]);
        expect(b.coverage()).toEqual([]); // not on disk yet
        expect((await seam.read(2500, 1000)).equals(blob.subarray(2500, 3500))).toBe(true);
        expect(writeDone).toBe(false);
        release();
        await b.flush();
        expect(b.coverage()).toEqual([{ start: 2000, end: 6000 }]);
        expect(writeDone).toBe(true);
        // mixed: part on disk, part still in memory
        failIt = false;
        sink(6000, blob.subarray(6000, 7000));
        expect((await seam.read(5000, 2000)).equals(blob.subarray(5000, 7000))).toBe(true);
        // out of range: logged, not thrown
        expect(() => sink(9990, Buffer.alloc(20))).not.toThrow();
      } else {
        failIt = true;
        const w = sink(0, blob.subarray(0, 3000));
        expect(seam.covered(0, 3000)).toBe(true);
        await w; // settles, failed write or not: the bytes are no longer read
        await b.flush();
        expect(seam.covered(0, 3000)).toBe(false);
        await expect(seam.read(0, 3000)).rejects.toMatchObject({ code: 'E_NOT_FOUND' });
        expect(b.missing(0, 3000)).toEqual([{ start: 0, end: 3000 }]);
      }
      await store.close();
    }
  });
});

describe('BlobStore: settle (bounded bytes a crash can lose)', () => {
  it('waits while more than settleBytes (2 x checkpointBytes) are not durably recorded, then resolves once they are', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // fdatasync on a loaded disk: the coverage record waits for it
    const slowSync = handleFs((fh) => ({
      datasync: async () => {
        await gate;
        await fh.datasync();
      },
    }));
    const store = await BlobStore.open({ root, fs: slowSync, checkpointBytes: 1000 });
    const blob = randomBytes(4000);
    const b = await store.openBlob(digestOf(blob), blob.length);
    const ticks = async (n: number): Promise<void> => {
      for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
    };

    await b.write(0, blob.subarray(0, 1500)); // a checkpoint starts and waits for fdatasync
    expect(b.unsettledBytes).toBe(1500);
    await b.settle(); // within the bound: at once, although nothing is recorded yet

    await b.write(1500, blob.subarray(1500, 2500));
    expect(b.unsettledBytes).toBe(2500);
    let settled = false;
    const s = b.settle().then(() => (settled = true));
    await ticks(20);
    expect(settled).toBe(false);

    release();
    await s;
    expect(b.unsettledBytes).toBe(0);
    // the record on disk covers everything written before settle() was called
    const record = JSON.parse(
      (await fsp.readFile(join(dir(), `${hexOf(digestOf(blob))}.coverage`))).toString('utf8'),
    ) as { intervals: Array<[number, number]> };
    expect(record.intervals).toEqual([[0, 2500]]);
    await store.close();
  });

  it('holds the background pass to 8 MiB unrecorded even when checkpoints are 64 MiB apart', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let syncs = 0;
    const slowSync = handleFs((fh) => ({
      datasync: async () => {
        syncs++;
        await gate;
        await fh.datasync();
      },
    }));
    // the defaults: a 64 MiB checkpoint, so 9 MiB of writes start no record on their own
    const store = await BlobStore.open({ root, fs: slowSync, checkpointMs: 1e9 });
    const size = 16 * 1024 * 1024; // never complete here (a complete blob is recorded at once)
    const b = await store.openBlob(digestOf(Buffer.alloc(size)), size);
    await b.write(0, Buffer.alloc(8 * 1024 * 1024));
    expect(syncs).toBe(0);
    await b.settle(); // 8 MiB: within the bound
    await b.write(8 * 1024 * 1024, Buffer.alloc(1024 * 1024));
    expect(syncs).toBe(0);
    let settled = false;
    const s = b.settle().then(() => (settled = true));
    await new Promise<void>((r) => setImmediate(r));
    expect(syncs).toBe(1); // settle started the record
    expect(settled).toBe(false);
    release();
    await s;
    expect(b.unsettledBytes).toBe(0);
    await store.close();
  });
});

describe('BlobStore: the page-aligned middle of a fast fill is written directly', () => {
  const MiB = 1 << 20;
  const PAGE = 4096;

  /** The real file system; `openDirect` opens an ordinary handle that records what it was given. */
  function recordingFs(directWrites: Array<[number, number]>, refuse = false): BlobFs & { opened: number } {
    const fs = handleFs(() => ({}));
    const out = {
      ...fs,
      opened: 0,
      openDirect: async (path: string): Promise<BlobFileHandle> => {
        out.opened++;
        if (refuse) throw Object.assign(new Error('no O_DIRECT here'), { code: 'E_NO_DIRECT' });
        const fh = await fsp.open(path, 'r+');
        return {
          write: (buf, off, len, pos) => {
            directWrites.push([pos, pos + len]);
            return fh.write(buf, off, len, pos);
          },
          read: (buf, off, len, pos) => fh.read(buf, off, len, pos),
          datasync: () => fh.datasync(),
          stat: () => fh.stat(),
          close: () => fh.close(),
        };
      },
    };
    return out;
  }

  /** Unaligned pieces of 2 MiB + 1 KiB, written one after the other. */
  async function fill(
    b: Awaited<ReturnType<BlobStore['openBlob']>>,
    blob: Buffer,
    piece: number,
  ): Promise<void> {
    for (let at = 0; at < blob.length; at += piece) {
      const end = Math.min(blob.length, at + piece);
      await b.write(at, blob.subarray(at, end));
    }
  }

  it('once the fill reaches the rate: middles go direct, page-aligned, ends buffered; every byte exact', async () => {
    const blob = randomBytes(40 * MiB + 777);
    const direct: Array<[number, number]> = [];
    const fs = recordingFs(direct);
    const store = await BlobStore.open({ root, fs, durable: false, now: () => 0 });
    const b = await store.openBlob(digestOf(blob), blob.length);
    await fill(b, blob, 2 * MiB + 1024);
    expect(b.complete).toBe(true);
    expect(fs.opened).toBe(1);
    // the first ~32 MiB fill the one-second window (the clock stands still); the rest goes direct
    expect(direct.length).toBeGreaterThan(0);
    for (const [s, e] of direct) {
      expect(s % PAGE).toBe(0);
      expect(e % PAGE).toBe(0);
      expect(s).toBeGreaterThanOrEqual(30 * MiB);
    }
    const directBytes = direct.reduce((n, [s, e]) => n + e - s, 0);
    expect(directBytes).toBeGreaterThan(6 * MiB);
    expect((await b.read(0, blob.length)).equals(blob)).toBe(true);
    await store.close();
    expect((await fsp.readFile(join(dir(), hexOf(digestOf(blob)) + '.partial'))).equals(blob)).toBe(true);
  });

  it('on the real file system (O_DIRECT, or its refusal on tmpfs): every byte exact, across a reopen', async () => {
    const blob = randomBytes(40 * MiB + 4097);
    const store = await BlobStore.open({ root, now: () => 0 });
    const b = await store.openBlob(digestOf(blob), blob.length);
    await fill(b, blob, 3 * MiB + 513);
    expect((await b.read(0, blob.length)).equals(blob)).toBe(true);
    await store.close();
    const again = await BlobStore.open({ root });
    const b2 = await again.openBlob(digestOf(blob), blob.length);
    expect(b2.complete).toBe(true);
    expect((await b2.read(0, blob.length)).equals(blob)).toBe(true);
    await again.close();
  });

  it('a slow fill stays in the page cache', async () => {
    const blob = randomBytes(12 * MiB + 5);
    const direct: Array<[number, number]> = [];
    let t = 0;
    const store = await BlobStore.open({
      root,
      fs: recordingFs(direct),
      durable: false,
      now: () => (t += 1000),
    });
    const b = await store.openBlob(digestOf(blob), blob.length);
    await fill(b, blob, 2 * MiB + 1024);
    expect(direct).toEqual([]);
    expect((await b.read(0, blob.length)).equals(blob)).toBe(true);
    await store.close();
  });

  it('a file system that refuses O_DIRECT: asked once, said once, every byte written through the page cache', async () => {
    const blob = randomBytes(40 * MiB + 3);
    const fs = recordingFs([], true);
    const log = captureLogger('info');
    const store = await BlobStore.open({ root, fs, durable: false, now: () => 0, logger: log.logger });
    const b = await store.openBlob(digestOf(blob), blob.length);
    await fill(b, blob, 2 * MiB + 1024);
    expect(fs.opened).toBe(1);
    expect(log.text().match(/refuses O_DIRECT/g)).toHaveLength(1);
    expect(store.stats().disabled).toBe(false);
    expect((await b.read(0, blob.length)).equals(blob)).toBe(true);
    await store.close();
  });
});
