import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { crashPoint } from '../util/crash-points.js';
import { createFileDirect } from '../util/direct-write.js';
import { gcPacer } from '../util/gc-pacer.js';
import { atNextTurn } from '../util/next-turn.js';
import { releaseBuffer } from '../util/release-buffer.js';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { SingleFlight } from '../util/single-flight.js';
import { WriteFaults } from '../util/write-faults.js';
import { DiskBudget, footprint } from './disk-budget.js';
import { DiskIndex } from './disk-index.js';
import { MemoryLru } from './memory-lru.js';
import { CachePaths, digestHex } from './paths.js';
import { buildIndexMap, cleanTemp, orderByAge, scanChunks } from './scan.js';
import { sha256Hex } from './verify.js';
import { DIRECT_MIN_BYTES, DIRECT_MIN_RATE, WriteRate } from './write-rate.js';
import { stampOf, VerifiedFiles } from './verified-files.js';
import { CACHE_DEFAULTS } from '../util/defaults.js';

export interface ChunkCacheOptions {
  /** Store root; the cache lives in `<root>/cache`. */
  root: string;
  /** Disk bound in bytes (block-rounded sizes of chunk files). Default CACHE_DEFAULTS (10 GiB). */
  maxBytes?: number;
  /** Keep at least this much free space on the cache filesystem (statfs). Default CACHE_DEFAULTS (1 GiB). */
  minFreeBytes?: number;
  /** Bounds the in-memory index (about 150 bytes per entry). Default 1 000 000 chunks. */
  maxEntries?: number;
  /** In-memory LRU budget in bytes. Default CACHE_DEFAULTS (16 MiB). */
  memoryBytes?: number;
  /**
   * Memory LRU entries unused this long leave once their chunk is on disk (checked every half of
   * it; 0: never). Default CACHE_DEFAULTS (30 s).
   */
  memoryIdleMs?: number;
  /** Monotonic clock in ms for the memory LRU's idle check (tests inject one). */
  now?: () => number;
  /** Minimum interval between statfs calls. Default 1000 ms. */
  statfsIntervalMs?: number;
  logger?: Logger;
}

export interface ChunkCacheStats {
  diskBytes: number;
  diskEntries: number;
  reservedBytes: number;
  /** Disk bytes accounted for the blob store (compressed bytes kept until verification). */
  externalBytes: number;
  memoryBytes: number;
  memoryEntries: number;
  memoryHits: number;
  diskHits: number;
  misses: number;
  writes: number;
  writeSkips: number;
  evictions: number;
  corrupt: number;
  pinnedEntries: number;
  scanComplete: boolean;
}

export { footprint } from './disk-budget.js';

/**
 * Chunks at least this large go to disk once a reader had all of their bytes, before their memory
 * copy leaves (ChunkCache.consumed). Smaller ones are decoded again from local bytes if ever asked
 * for again (a 54 KiB zstd:chunked chunk in ~0.2 ms): a file for each of them cost a cold
 * zstd:chunked read half its speed (see chunk-loader.ts deliver).
 */
const DISK_AFTER_READ_MIN = 1024 * 1024;

/*
 * Chunk files of DIRECT_MIN_BYTES and more (the 4 MiB chunks of a model read and of the background
 * pass) are written with O_DIRECT (util/direct-write.ts) while the cache is being filled at
 * DIRECT_MIN_RATE or faster (cache/write-rate.ts). Through the page cache, those writes were 21-31 % of the store's CPU during a cold model read
 * on loopback (every fresh page-cache page faults in this VM); O_DIRECT read the shard 97 vs 80
 * MB/s (harness p50, same run). But a file written so is not in the page cache, and the kernel
 * does drop pages of a shard read long ago (session 28: this VM pages out memory unused for ~1 s):
 * each such page is then read from the disk, not copied from the page cache. On a 100 Mbit/s link
 * (a 10 s cold read, CPU mostly idle) that took the warm re-read to 948-1846 vs 1789-2504 MB/s
 * (same run, 3 each). So a slow fill, where the copy costs nothing that is missed, keeps the page
 * cache. Smaller chunks (start-up files, zstd:chunked's ~54 KiB) always do: a direct write costs a
 * disk round trip each.
 */

/**
 * Content-addressed store of verified, decompressed chunks: `<root>/cache/chunks/sha256/xx/<hex>`,
 * the file holding exactly the chunk bytes. Identical chunks of different layers/images are stored
 * once and survive restarts. A chunk file is hashed whole (off the main thread) against its name
 * the first time this process reads it and whenever it changed since (verified-files.ts), so a
 * torn write after a crash, bit rot or tampering is detected, deleted and reported as a miss (the
 * caller refetches); it is never served. Slices of files verified since start are read directly
 * (`readSlice`). Callers must only `put` verified bytes.
 *
 * Returned buffers are shared with the in-memory LRU: treat them as read-only.
 */
export class ChunkCache {
  readonly paths: CachePaths;
  private readonly maxEntries: number;
  private readonly logger: Logger;
  private readonly budget: DiskBudget;
  private readonly memory: MemoryLru;
  private readonly index = new DiskIndex();
  /** Instance prefix for temp names, so a concurrent start-up scan never deletes our own. */
  private readonly tmpPrefix = `${process.pid}-${randomBytes(4).toString('hex')}-`;
  private tmpCounter = 0;
  private readonly knownDirs = new Set<string>();
  private readonly memoryIdleMs: number;
  private idleTimer: NodeJS.Timeout | undefined;
  /** Chunk files verified by this process: slices of them are read without re-hashing. */
  private readonly verified: VerifiedFiles;
  private readonly reads = new SingleFlight<string, Buffer | undefined>();
  private readonly writes = new SingleFlight<string, void>();
  private scanned = false;
  private closed = false;
  /** O_DIRECT chunk writes: off once the file system refused them. */
  private direct = true;
  /** How fast large chunk files are being written (DIRECT_MIN_RATE). */
  private readonly largeWrites: WriteRate;
  /** Readers holding chunk buffers across turns of the event loop, per chunk (`borrow`). */
  private readonly borrowed = new Map<string, number>();
  /** Buffers that left the LRU while borrowed: released when the last borrower is done. */
  private readonly heldBack = new Map<string, Buffer[]>();
  private scanPromise: Promise<void> = Promise.resolve();
  /** Failed disk writes: one warning per condition (ENOSPC, EROFS...), counters for metrics. */
  readonly writeFaults = new WriteFaults({
    failed: 'cannot write chunk to cache',
    resumed: 'cache writes resumed',
  });
  private readonly counters = {
    memoryHits: 0,
    diskHits: 0,
    misses: 0,
    writes: 0,
    writeSkips: 0,
    corrupt: 0,
  };

  private constructor(opts: ChunkCacheOptions) {
    this.paths = new CachePaths(opts.root);
    const bounds = {
      maxBytes: opts.maxBytes ?? CACHE_DEFAULTS.maxBytes,
      minFreeBytes: opts.minFreeBytes ?? CACHE_DEFAULTS.minFreeBytes,
      maxEntries: opts.maxEntries ?? 1_000_000,
    };
    this.maxEntries = bounds.maxEntries;
    this.logger = opts.logger ?? silentLogger;
    this.largeWrites = new WriteRate(opts.now ?? ((): number => performance.now()));
    this.memory = new MemoryLru(opts.memoryBytes ?? CACHE_DEFAULTS.memoryBytes, opts.now, (hex, buf) =>
      this.retire(hex, buf),
    );
    this.memoryIdleMs = opts.memoryIdleMs ?? CACHE_DEFAULTS.memoryIdleMs;
    this.verified = new VerifiedFiles(bounds.maxEntries);
    for (const [k, v] of Object.entries(bounds)) {
      if (!Number.isFinite(v) || v < 0)
        throw new StoreError('E_CONFIG', `cache ${k} must be >= 0`, { [k]: v });
    }
    const statfsIntervalMs = opts.statfsIntervalMs ?? 1000;
    this.budget = new DiskBudget(
      this.index,
      this.paths,
      { ...bounds, statfsIntervalMs },
      this.logger,
      (hex) =>
        // an evicted chunk's kept read handle would keep its blocks in use
        this.verified.forget(hex),
    );
  }

  /** Creates the directories and starts the index scan in the background (not awaited). */
  static async open(opts: ChunkCacheOptions): Promise<ChunkCache> {
    const cache = new ChunkCache(opts);
    if (cache.memoryIdleMs > 0) {
      cache.idleTimer = setInterval(() => cache.dropIdleMemory(), Math.max(1000, cache.memoryIdleMs / 2));
      cache.idleTimer.unref();
    }
    await mkdir(cache.paths.chunks, { recursive: true, mode: 0o700 });
    await mkdir(cache.paths.tmp, { recursive: true, mode: 0o700 });
    cache.scanPromise = cache.scan().catch((err: unknown) => {
      cache.logger.warn({ err }, 'chunk cache scan failed; index covers only chunks used since start');
      cache.scanned = true;
    });
    return cache;
  }

  /** Byte budget of the in-memory LRU (read-ahead keeps its window within it). */
  get memoryLimit(): number {
    return this.memory.limit;
  }

  /** Resolves when the start-up scan has finished (tests, status). */
  whenScanned(): Promise<void> {
    return this.scanPromise;
  }

  /** Synchronous fast path: a verified chunk already in memory. */
  getMemory(digest: string): Buffer | undefined {
    const hex = digestHex(digest);
    const buf = this.memory.get(hex);
    if (buf !== undefined) {
      this.counters.memoryHits++;
      this.index.touch(hex);
    }
    return buf;
  }

  /** True when the chunk is believed present (memory or disk index); a later get may still miss. */
  has(digest: string): boolean {
    const hex = digestHex(digest);
    // a chunk being written is present too (a background put skips the memory LRU)
    return this.memory.has(hex) || this.index.has(hex) || this.writes.has(hex);
  }

  /**
   * A reader was served `bytes` of the chunk. Once all of its bytes were served its memory copy
   * leaves the LRU: the kernel's page cache holds what the reader got (kernel_cache), so the copy
   * would only take memory from chunks still to be read (a sequential reader otherwise keeps the whole LRU
   * of chunks it has passed). It never leaves as the only copy: it goes once the chunk is on disk,
   * or at once when `heldElsewhere` (the caller holds its compressed bytes locally) and it is
   * small. A large one is written to disk first: the kernel does drop single pages of a file read
   * long ago (a warm re-read of a model shard at 100 Mbit/s asked for a few 4 KiB pages again),
   * and each such page would otherwise cost decoding and hashing its whole chunk again, where a
   * chunk file costs a 4 KiB read.
   */
  consumed(digest: string, bytes: number, heldElsewhere: boolean): void {
    const hex = digestHex(digest);
    if (!this.memory.consume(hex, bytes)) return;
    const dropIfOnDisk = (): void => {
      if (this.index.has(hex)) this.memory.delete(hex);
    };
    if (this.index.has(hex)) {
      this.memory.delete(hex);
      return;
    }
    const writing = this.writes.get(hex);
    if (writing !== undefined) {
      void writing.then(dropIfOnDisk, () => undefined);
      return;
    }
    const mem = this.memory.peek(hex);
    if (mem === undefined) return;
    if (heldElsewhere && mem.length < DISK_AFTER_READ_MIN) {
      this.memory.delete(hex);
      return;
    }
    void this.put(digest, mem, { memory: false }).then(dropIfOnDisk);
  }

  /** True when the chunk is on disk or being written there (not merely in the memory LRU). */
  onDisk(digest: string): boolean {
    const hex = digestHex(digest);
    return this.index.has(hex) || this.writes.has(hex);
  }

  /**
   * Write the memory copy of a chunk kept off disk (`put(..., { disk: false })`) to disk, as a
   * disk-only put would. False when there is no memory copy of `size` bytes (the caller decodes it).
   * Not counted as a memory hit: nobody read it.
   */
  async persist(digest: string, size: number): Promise<boolean> {
    const hex = digestHex(digest);
    const mem = this.memory.get(hex);
    if (mem === undefined || mem.length !== size) return false;
    await this.put(digest, mem, { memory: false });
    return true;
  }

  /** The chunk's bytes, verified, or undefined (absent, evicted, or found corrupt and removed). */
  async get(digest: string): Promise<Buffer | undefined> {
    const hex = digestHex(digest);
    const mem = this.memory.get(hex);
    if (mem !== undefined) {
      this.counters.memoryHits++;
      this.index.touch(hex);
      return mem;
    }
    // A chunk whose disk write is still running (and already left a small memory LRU) is read
    // back once written, never fetched again.
    const writing = this.writes.get(hex);
    if (writing !== undefined) await writing;
    // Before the scan completes the index is partial, so the file may exist unknown to it.
    if (this.scanned && !this.index.has(hex)) {
      this.counters.misses++;
      return undefined;
    }
    return await this.reads.run(hex, () => this.readVerified(hex));
  }

  /**
   * Copy bytes [from, to) of the chunk (`size` bytes long) into `out` at `pos` when that needs no
   * fetch and no whole-chunk hash (in memory, or a file this process verified, unchanged since).
   * False otherwise, or when its real size is not `size`: the caller then loads it the usual way.
   */
  async readSlice(
    digest: string,
    size: number,
    slice: { from: number; to: number },
    out: Buffer,
    pos: number,
  ): Promise<boolean> {
    const hex = digestHex(digest);
    const { from, to } = slice;
    const mem = this.getMemory(digest);
    if (mem !== undefined) {
      if (mem.length !== size) return false;
      mem.copy(out, pos, from, to);
      return true;
    }
    const writing = this.writes.get(hex);
    if (writing !== undefined) await writing;
    if (!(await this.verified.readInto(hex, this.paths.chunkFile(hex), size, slice, out, pos))) return false;
    this.counters.diskHits++;
    this.index.touch(hex);
    return true;
  }

  /** True when `readSlice` can serve the chunk without hashing it (synchronous, a hint). */
  hasVerified(digest: string): boolean {
    const hex = digestHex(digest);
    return this.memory.has(hex) || this.verified.has(hex) || this.writes.has(hex);
  }

  private async readVerified(hex: string): Promise<Buffer | undefined> {
    const file = this.paths.chunkFile(hex);
    let data: Buffer;
    let fh: FileHandle | undefined;
    let before: string | undefined;
    try {
      fh = await open(file, 'r');
      // mtime: recency for the LRU order rebuilt after a restart (touched before the stamp is taken)
      const now = new Date();
      await fh.utimes(now, now).catch(() => undefined);
      before = stampOf(await fh.stat({ bigint: true }));
      data = await fh.readFile();
    } catch (err) {
      await fh?.close().catch(() => undefined);
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        this.logger.warn({ err, file }, 'cannot read cached chunk');
      }
      this.verified.forget(hex);
      this.index.remove(hex);
      this.counters.misses++;
      return undefined;
    }
    try {
      const actual = await sha256Hex(data);
      if (actual !== hex) {
        this.counters.corrupt++;
        this.counters.misses++;
        this.verified.forget(hex);
        this.index.remove(hex);
        this.logger.warn(
          { file, size: data.length, actual },
          'corrupt chunk in cache (torn write?); removed',
        );
        await unlink(file).catch(() => undefined);
        return undefined;
      }
      // stamped only if nothing changed the file while it was read and hashed
      const after = await fh.stat({ bigint: true });
      if (stampOf(after) === before) this.verified.recordStat(hex, after);
    } finally {
      await fh.close().catch(() => undefined);
    }
    if (this.index.has(hex)) this.index.touch(hex);
    // Unknown before the scan finished: from an earlier run; after it: evicted while being read
    else if (!this.scanned) this.index.add(hex, footprint(data.length));
    this.memory.set(hex, data);
    this.counters.diskHits++;
    return data;
  }

  /**
   * Store a VERIFIED chunk. Memory immediately; disk atomically (temp + rename, mode 0600) within
   * the bounds, evicting least recently used unpinned chunks first. If the chunk cannot fit (all
   * pinned, too big, disk nearly full) it is simply not written to disk. Never throws for I/O.
   * `memory: false` (the background pass: nobody is about to read those chunks) writes to disk
   * only, so a background pass neither holds the LRU's bytes after it nor evicts the chunks
   * readers use. `disk: false` skips the disk when the memory LRU kept the chunk: the caller holds
   * its compressed bytes locally and a pass that persists chunks (the background pass) writes it
   * later. A chunk the LRU does not keep (too large, no budget) is written all the same.
   * Resolves whether the cache keeps a reference to `data` (the memory LRU holds it): when not,
   * the caller may release the buffer (util/release-buffer.ts), the disk write being done. When it
   * does, `data` is the cache's from then on: released once it leaves the LRU (`retire`), so a
   * caller keeping bytes for longer than this turn of the event loop keeps a copy.
   */
  async put(digest: string, data: Buffer, opts: { memory?: boolean; disk?: boolean } = {}): Promise<boolean> {
    const hex = digestHex(digest);
    const inMemory = opts.memory !== false && this.memory.set(hex, data);
    if (this.closed || (opts.disk === false && inMemory)) return inMemory;
    if (this.index.has(hex)) {
      this.index.touch(hex);
      return inMemory;
    }
    await this.writes.run(hex, () => this.write(hex, data));
    // not written (no room, all pinned, an I/O error): a verified chunk is kept in memory at least
    if (opts.memory === false && !this.index.has(hex)) return this.memory.set(hex, data);
    return inMemory;
  }

  private async write(hex: string, data: Buffer): Promise<void> {
    const bytes = footprint(data.length);
    await this.budget.refreshFree();
    const victims = this.budget.makeRoom(bytes, this.index.isPinned(hex));
    if (victims === undefined) {
      this.counters.writeSkips++;
      return;
    }
    this.budget.take(bytes);
    const tmp = join(this.paths.tmp, `${this.tmpPrefix}${this.tmpCounter++}`);
    let failed = false;
    try {
      for (const v of victims) this.budget.unlinkChunk(v.hex);
      // Disk usage must drop before it grows again: wait for every eviction decided so far.
      await this.budget.unlinked();
      const dir = this.paths.chunkDir(hex);
      if (!this.knownDirs.has(dir)) {
        await mkdir(dir, { recursive: true, mode: 0o700 });
        this.knownDirs.add(dir);
      }
      const fh = await this.createFile(tmp, data);
      try {
        crashPoint('chunk-write');
        await rename(tmp, this.paths.chunkFile(hex));
        // verified bytes: slices need no hash (stat after the rename, which moves ctime)
        await this.verified.record(hex, fh);
      } finally {
        await fh.close().catch(() => undefined);
      }
      this.index.add(hex, bytes);
      this.counters.writes++;
      this.writeFaults.succeeded(this.logger);
      if (this.index.count > this.maxEntries) this.budget.evictForEntries();
    } catch (err) {
      failed = true;
      this.counters.writeSkips++;
      this.writeFaults.failed(err, this.logger, { digest: `sha256:${hex}` });
      await unlink(tmp).catch(() => undefined);
    } finally {
      this.budget.settle(bytes, failed);
    }
  }

  /**
   * A new file `tmp` holding `data`. Chunks of DIRECT_MIN_BYTES and more skip the page cache
   * (util/direct-write.ts) while they are being written at DIRECT_MIN_RATE or faster, unless the file
   * system refused O_DIRECT once; otherwise a buffered write.
   */
  private async createFile(tmp: string, data: Buffer): Promise<FileHandle> {
    const large = data.length >= DIRECT_MIN_BYTES;
    if (large) this.largeWrites.add(data.length);
    if (large && this.direct && this.largeWrites.perSecond() >= DIRECT_MIN_RATE) {
      try {
        return await createFileDirect(tmp, data, 0o600);
      } catch (err) {
        if ((err as { code?: unknown }).code !== 'E_NO_DIRECT') throw err;
        this.direct = false;
        this.logger.info(
          { dir: this.paths.tmp },
          'chunk cache: file system refuses O_DIRECT, chunks written through the page cache',
        );
        await unlink(tmp).catch(() => undefined);
      }
    }
    const fh = await open(tmp, 'wx', 0o600);
    try {
      await fh.writeFile(data);
      return fh;
    } catch (err) {
      await fh.close().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Account `bytes` of disk used by someone else under the same bounds (the blob store's
   * compressed bytes), evicting unpinned chunks to make room. False: they do not fit.
   */
  async reserveExternal(bytes: number): Promise<boolean> {
    if (this.closed || !(bytes >= 0)) return false;
    return await this.budget.reserveExternal(bytes);
  }

  /** Give back bytes taken with reserveExternal (the files were deleted). */
  releaseExternal(bytes: number): void {
    this.budget.releaseExternal(bytes);
  }

  /** Pin the chunks of a layer: they are never evicted while any layer pins them. */
  pin(layerKey: string, digests: Iterable<string>): void {
    const hexes: string[] = [];
    for (const d of digests) hexes.push(digestHex(d));
    this.index.pin(layerKey, hexes);
  }

  unpin(layerKey: string): void {
    this.index.unpin(layerKey);
  }

  isPinned(layerKey: string): boolean {
    return this.index.isLayerPinned(layerKey);
  }

  stats(): ChunkCacheStats {
    return {
      diskBytes: this.index.bytes,
      diskEntries: this.index.count,
      reservedBytes: this.budget.reserved,
      externalBytes: this.budget.external,
      memoryBytes: this.memory.size,
      memoryEntries: this.memory.count,
      ...this.counters,
      evictions: this.budget.evictions,
      pinnedEntries: this.index.pinnedCount,
      scanComplete: this.scanned,
    };
  }

  /**
   * A buffer left the memory LRU (read to its end and on disk, evicted, idle): its memory goes back
   * now (util/release-buffer.ts) instead of at the next full garbage collection, which a cold model
   * read otherwise paced every 16 MiB of chunks. Not within this turn of the event loop: a FUSE read
   * served from a view of it copies it out in this turn (ReadOptions.transient). Other holders are
   * covered: readers keeping bytes longer get copies, a read waiting on several chunks borrows them
   * (released after it is done), the LRU may hold it again (kept), and a disk write of the chunk may
   * be reading it (released after the write).
   */
  private retire(hex: string, buf: Buffer): void {
    atNextTurn(() => this.releaseRetired(hex, buf));
  }

  private releaseRetired(hex: string, buf: Buffer): void {
    if (this.memory.peek(hex) === buf) return;
    if (this.borrowed.has(hex)) {
      const held = this.heldBack.get(hex);
      if (held === undefined) this.heldBack.set(hex, [buf]);
      else if (!held.includes(buf)) held.push(buf);
      return;
    }
    const writing = this.writes.get(hex);
    if (writing !== undefined) {
      const later = (): void => this.retire(hex, buf);
      void writing.then(later, later);
      return;
    }
    releaseBuffer(buf);
  }

  /**
   * A reader is about to wait for several chunks and will hold the buffers of those that arrive
   * first across turns of the event loop: none of them is released until it calls the returned
   * function (once, when it has copied what it needs).
   */
  borrow(digests: readonly string[]): () => void {
    const hexes = digests.map((d) => digestHex(d));
    for (const h of hexes) this.borrowed.set(h, (this.borrowed.get(h) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      for (const h of hexes) {
        const n = (this.borrowed.get(h) ?? 1) - 1;
        if (n > 0) {
          this.borrowed.set(h, n);
          continue;
        }
        this.borrowed.delete(h);
        const held = this.heldBack.get(h);
        if (held === undefined) continue;
        this.heldBack.delete(h);
        for (const buf of held) this.retire(h, buf);
      }
    };
  }

  /** Drop the in-memory LRU (tests: force disk reads). */
  dropMemory(): void {
    this.memory.clear();
  }

  /** Wait for pending writes and evictions and stop the scan. The cache stays readable. */
  /**
   * Drop the memory LRU's entries unused for `memoryIdleMs` whose chunk is on disk (a later read
   * costs a chunk-file read, never a decode or a fetch), then collect the garbage they became: an
   * idle store decodes nothing, so no paced collection would come. Returns the bytes dropped.
   */
  dropIdleMemory(): number {
    if (this.closed || !(this.memoryIdleMs > 0)) return 0;
    const bytes = this.memory.dropUnused(this.memoryIdleMs, (hex) => this.index.has(hex));
    if (bytes > 0) {
      // the dropped buffers are released (retire); other garbage counted meanwhile is collected
      gcPacer.collectPending();
      this.logger.debug({ bytes }, 'idle chunks left the memory LRU');
    }
    return bytes;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.idleTimer !== undefined) clearInterval(this.idleTimer);
    try {
      await this.flush();
      await this.scanPromise;
    } finally {
      this.verified.close();
    }
  }

  /** Wait for pending writes and evictions without closing. */
  async flush(): Promise<void> {
    await Promise.all([...this.writes.values()]);
    await this.budget.unlinked();
  }

  private async scan(): Promise<void> {
    const started = Date.now();
    const removedTmp = await cleanTemp(this.paths, this.tmpPrefix);
    const found = await scanChunks(this.paths, this.logger, () => this.closed);
    const ordered = await orderByAge(found);
    this.index.adoptScanned(await buildIndexMap(ordered, footprint));
    this.scanned = true;
    await this.budget.enforce();
    this.logger.info(
      { entries: this.index.count, bytes: this.index.bytes, removedTmp, ms: Date.now() - started },
      'chunk cache index ready',
    );
  }
}
