import type { ChunkCache } from '../cache/chunk-cache.js';
import { isSha256Digest } from '../cache/paths.js';
import { decodeChunk, decodeChunks, isZerosVerified, verifyZeros } from '../format/codec.js';
import type { Chunk, Compression } from '../format/model.js';
import { asStoreError, StoreError, type ErrorContext } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { releaseBuffer } from '../util/release-buffer.js';
import { SingleFlight } from '../util/single-flight.js';
import { coalesce } from './ranges.js';
import { READ_AROUND_BYTES, ReadAround } from './read-around.js';
import type { Priority, SpanFetcher } from './span-fetcher.js';
import { allAborted, Interest, Waiters } from './waiters.js';

export interface LoaderContext {
  fetcher: SpanFetcher;
  cache: ChunkCache;
  compression: Compression;
  blobSize: number;
  /** On-demand spans closer than this are fetched as one range. */
  maxGap: number;
  /** Prefetch spans closer than this are fetched as one range (fewer round trips). */
  prefetchMaxGap: number;
  logger: Logger;
  context: ErrorContext;
  /**
   * Wraps fetch + decode work at the given priority (the scheduler's tiers); `local`: every span is
   * held by the local compressed store, no network needed (on-demand work then preempts nothing).
   */
  runFetch<T>(
    priority: Exclude<Priority, 'background'> | 'read-ahead',
    fn: () => Promise<T>,
    signal?: AbortSignal,
    local?: boolean,
  ): Promise<T>;
  onVerified(chunk: Chunk): void;
  /** Was the chunk verified before (by this layer)? A second decode goes to disk (see deliver). */
  wasVerified?(chunk: Chunk): boolean;
  /**
   * The layer's data chunks sorted by compressed offset (its plan), once known: an on-demand fetch
   * takes the whole chunks that follow its last missing one along (see `readAroundBytes`).
   */
  neighbours?: () => readonly Chunk[] | undefined;
  /**
   * Compressed bytes of whole following chunks an on-demand fetch may add past the spans it was
   * asked for (0: none). On a link with a 30 ms round trip 128 KiB cost about a third of one
   * round trip at 100 Mbit/s, and files read together at start-up usually lie together in the blob.
   */
  readAroundBytes?: number;
}

export { READ_AROUND_BYTES, MAX_READ_AROUND_BYTES } from './read-around.js';

/** How a load is run: its priority tier and an optional signal (only waiting is cancelled). */
export interface LoadOptions {
  priority?: Exclude<Priority, 'background'>;
  /**
   * An on-demand load for a sequential reader's next bytes (read-ahead): fetched like one, but in
   * the scheduler's read-ahead tier, which does not hold prefetch back.
   */
  readAhead?: boolean;
  signal?: AbortSignal;
  /**
   * The caller stops waiting (a read's deadline or interrupt): a chunk every waiter gave up on
   * leaves the single-flight table and its fetch is aborted. Without it the caller waits for good
   * (read-ahead and prefetch: their fetches complete and fill the cache).
   */
  giveUp?: AbortSignal;
  /**
   * The chunk list of the file the chunks belong to (read-around takes the asked chunk's file
   * block from it: read-around.ts).
   */
  file?: readonly Chunk[];
  /**
   * Compressed bytes of this load's own network fetch as they arrive (SpanFetchOptions.onReceived).
   * A load that asks for them is fetched on its own, not in the end-of-turn batch of on-demand reads.
   */
  onReceived?: (bytes: number) => void;
}

interface Pending {
  chunk: Chunk;
  /** The file it was first asked for (its node's chunk list). */
  file: readonly Chunk[] | undefined;
  waiters: Waiters;
  resolve: (b: Buffer) => void;
  reject: (e: unknown) => void;
  settled: boolean;
}

/**
 * Bytes of one chunk as the loader hands them out: the verified buffer, or `ZEROS` for a verified
 * `zeros` chunk, whose content (`size` zero bytes) is never materialised: a hole can be GiBs.
 */
export const ZEROS = null;
export type ChunkBytes = Buffer | typeof ZEROS;

interface PendingSpan {
  offset: number;
  /** Exclusive. */
  end: number;
  /** Chunks decoded from this span (none: read-around bytes, only kept locally). */
  entries: Pending[];
}

/**
 * Turns chunk lists into verified bytes: memory cache, then disk cache, then ONE coalesced fetch
 * for everything still missing, decoded and verified per chunk. Concurrent requests for the same
 * digest share one promise (single flight), whichever request started it.
 */
export class ChunkLoader {
  private readonly inflight = new SingleFlight<string, Buffer>();
  private readonly waiting = new WeakMap<Promise<Buffer>, Waiters>();
  /** On-demand entries waiting for the end of this event-loop turn, fetched together. */
  private batch: Pending[] = [];
  private batchArmed = false;
  private readonly around: ReadAround;

  constructor(private readonly ctx: LoaderContext) {
    this.around = new ReadAround({
      blobSize: ctx.blobSize,
      maxGap: ctx.maxGap,
      // read-around bytes are kept by the local compressed store; without one they would be lost
      baseBytes: ctx.fetcher.keepsBytes ? (ctx.readAroundBytes ?? READ_AROUND_BYTES) : 0,
      neighbours: () => ctx.neighbours?.(),
      isFresh: (c) =>
        !this.inflight.has(c.digest) &&
        !ctx.cache.has(c.digest) &&
        !ctx.fetcher.holds(c.compressedOffset, c.compressedEnd),
    });
  }

  /** In-memory bytes for every chunk, or undefined if any needs I/O (the synchronous fast path). */
  tryMemory(chunks: readonly Chunk[]): ChunkBytes[] | undefined {
    const out: ChunkBytes[] = [];
    for (const c of chunks) {
      if (c.zeros) {
        if (!isZerosVerified(c)) return undefined;
        out.push(ZEROS);
        continue;
      }
      if (!isSha256Digest(c.digest)) return undefined;
      const b = this.ctx.cache.getMemory(c.digest);
      if (b === undefined || b.length !== c.size) return undefined;
      this.ctx.onVerified(c);
      out.push(b);
    }
    return out;
  }

  /**
   * Verified bytes of each chunk, in order (`ZEROS` for zeros chunks). Never throws
   * synchronously, and every single-flight entry it registers settles whatever happens.
   * `context` (e.g. the file's path) is added to errors that concern this request alone.
   */
  load(chunks: readonly Chunk[], context?: ErrorContext, opts: LoadOptions = {}): Promise<ChunkBytes[]> {
    const results: Array<ChunkBytes | Promise<ChunkBytes>> = [];
    const mine = new Map<string, Pending>();
    const interest = new Interest(opts.giveUp);
    try {
      for (const c of chunks) results.push(this.request(c, mine, context, interest, opts.file));
    } catch (err) {
      results.push(Promise.reject(asStoreError(err, 'E_IO', this.ctx.context)));
    } finally {
      // Entries registered before anything went wrong still get their fetch (others share them).
      if (mine.size > 0) this.schedule([...mine.values()], opts);
    }
    const all = Promise.all(results);
    void Promise.allSettled(results).then(() => interest.done());
    // Only the first rejection is reported; later ones must not surface as unhandled.
    for (const r of results) if (r instanceof Promise) r.catch(() => undefined);
    return all;
  }

  /** Are fetched compressed bytes kept by the layer's local store (so `stage` can be used)? */
  get keepsBytes(): boolean {
    return this.ctx.fetcher.keepsBytes;
  }

  /**
   * Bring the compressed bytes of `chunks` into the layer's local store without decoding them, in
   * one request at the prefetch tier: a later load decodes them from local bytes, never from the
   * network (see LazyLayer.prefetch). Chunks cached, held or in flight are skipped. Needs a local
   * store (`keepsBytes`); without one it does nothing.
   */
  async stage(chunks: readonly Chunk[], opts: { signal?: AbortSignal } = {}): Promise<void> {
    if (!this.keepsBytes) return;
    const spans = chunks.filter(
      (c) =>
        !c.zeros &&
        this.spanInBlob(c) &&
        !this.ctx.fetcher.holds(c.compressedOffset, c.compressedEnd) &&
        !this.ctx.cache.has(c.digest),
    );
    if (spans.length === 0) return;
    const ranges = coalesce(
      spans.map((c) => ({ offset: c.compressedOffset, end: c.compressedEnd })),
      this.ctx.prefetchMaxGap,
    ).map((r) => ({ offset: r.offset, length: r.length }));
    await this.ctx.runFetch(
      'prefetch',
      async () => {
        const { release } = await this.ctx.fetcher.fetchLeased(ranges, {
          priority: 'prefetch',
          signal: opts.signal,
        });
        // the local store has them (its write holds the buffer until done): nothing reads them here
        release();
      },
      opts.signal,
    );
  }

  private request(
    c: Chunk,
    mine: Map<string, Pending>,
    context: ErrorContext | undefined,
    interest: Interest,
    file: readonly Chunk[] | undefined,
  ): ChunkBytes | Promise<ChunkBytes> {
    if (c.zeros) return this.zeros(c, context);
    if (!isSha256Digest(c.digest)) {
      return Promise.reject(this.badToc('chunk digest is not sha256:<hex>', c));
    }
    const mem = this.ctx.cache.getMemory(c.digest);
    if (mem !== undefined) {
      this.ctx.onVerified(c);
      return this.sized(mem, c);
    }
    const shared = this.inflight.get(c.digest);
    if (shared !== undefined) {
      const w = this.waiting.get(shared);
      if (w !== undefined) interest.wait(w);
      return shared.then((b) => this.sized(b, c));
    }
    const { entry, promise } = this.register(c, file);
    interest.wait(entry.waiters);
    mine.set(c.digest, entry);
    return promise.then((b) => this.sized(b, c));
  }

  /** A new single-flight entry for `c`, settled by whoever fetches it. */
  private register(c: Chunk, file?: readonly Chunk[]): { entry: Pending; promise: Promise<Buffer> } {
    let resolve!: (b: Buffer) => void;
    let reject!: (e: unknown) => void;
    const p = new Promise<Buffer>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // everyone gave up: later reads must not join a fetch that may be stuck
    const waiters = new Waiters(() => this.inflight.forget(c.digest, promise));
    const entry: Pending = {
      chunk: c,
      file,
      waiters,
      settled: false,
      resolve: (b) => {
        entry.settled = true;
        resolve(b);
      },
      reject: (e) => {
        entry.settled = true;
        reject(e);
      },
    };
    const promise = this.inflight.run(c.digest, () => p);
    this.waiting.set(promise, waiters);
    // an entry nobody waits on (read-around) must not surface as an unhandled rejection
    promise.catch(() => undefined);
    return { entry, promise };
  }

  /**
   * On-demand entries wait for the end of this event-loop turn, so reads the kernel sent together
   * (several files, several pages) share one coalesced fetch instead of a round trip each.
   */
  private schedule(entries: Pending[], opts: LoadOptions): void {
    const joinNow = entries.every((e) =>
      this.ctx.fetcher.covers(e.chunk.compressedOffset, e.chunk.compressedEnd),
    );
    // prefetch runs in its own batches; bytes already in flight are joined at once, before that
    // fetch may end
    if (
      (opts.priority ?? 'on-demand') !== 'on-demand' ||
      joinNow ||
      opts.onReceived !== undefined ||
      opts.readAhead === true
    ) {
      void this.resolve(entries, opts);
      return;
    }
    this.batch.push(...entries);
    if (this.batchArmed) return;
    this.batchArmed = true;
    setImmediate(() => {
      const b = this.batch;
      this.batch = [];
      this.batchArmed = false;
      void this.resolve(b, {});
    });
  }

  private async zeros(c: Chunk, context: ErrorContext | undefined): Promise<ChunkBytes> {
    // Checked once per (size, digest) without ever allocating the hole.
    await verifyZeros(c, context === undefined ? this.ctx.context : { ...this.ctx.context, ...context });
    return ZEROS;
  }

  /** The bytes, or a rejected promise when the TOC's size disagrees with the digest's content. */
  private sized(b: Buffer, c: Chunk): Buffer | Promise<Buffer> {
    if (b.length !== c.size) {
      return Promise.reject(this.badToc(`chunk size ${c.size} does not match its digest's content`, c));
    }
    return b;
  }

  /** Is the chunk's compressed span a non-empty range inside the blob (TOC data is untrusted)? */
  private spanInBlob(c: Chunk): boolean {
    return (
      Number.isSafeInteger(c.compressedOffset) &&
      Number.isSafeInteger(c.compressedEnd) &&
      c.compressedOffset >= 0 &&
      c.compressedEnd > c.compressedOffset &&
      c.compressedEnd <= this.ctx.blobSize
    );
  }

  private badToc(message: string, c: Chunk): StoreError {
    return new StoreError('E_BAD_TOC', message, {
      ...this.ctx.context,
      offset: c.fileOffset,
      compressedOffset: c.compressedOffset,
    });
  }

  private async resolve(entries: Pending[], opts: LoadOptions): Promise<void> {
    try {
      await this.resolveEntries(entries, opts);
    } catch (err) {
      for (const e of entries) if (!e.settled) e.reject(asStoreError(err, 'E_IO', this.ctx.context));
    } finally {
      // Safety net: no single-flight entry may stay pending, or later reads would wait forever.
      for (const e of entries) {
        if (!e.settled) {
          e.reject(
            new StoreError('E_IO', 'chunk load ended without a result', {
              ...this.ctx.context,
              offset: e.chunk.fileOffset,
              digest: e.chunk.digest,
            }),
          );
        }
      }
    }
  }

  private async resolveEntries(entries: Pending[], opts: LoadOptions): Promise<void> {
    const priority = opts.priority ?? 'on-demand';
    const missing: Pending[] = [];
    await Promise.all(
      entries.map(async (e) => {
        try {
          const b = await this.ctx.cache.get(e.chunk.digest);
          if (b === undefined) missing.push(e);
          else {
            this.ctx.onVerified(e.chunk);
            e.resolve(b);
          }
        } catch (err) {
          e.reject(err);
        }
      }),
    );
    if (missing.length === 0) return;
    try {
      const local = missing.every((e) =>
        this.ctx.fetcher.holdsLocally(e.chunk.compressedOffset, e.chunk.compressedEnd),
      );
      await this.ctx.runFetch(
        priority === 'on-demand' && opts.readAhead === true ? 'read-ahead' : priority,
        () => this.fetchAndDecode(missing, priority, opts.onReceived),
        opts.signal,
        local,
      );
    } catch (err) {
      for (const e of missing) e.reject(err);
    }
  }

  /** One coalesced fetch for all `entries`, then decode + verify + cache each chunk. */
  private async fetchAndDecode(
    entries: Pending[],
    priority: Exclude<Priority, 'background'>,
    onReceived?: (bytes: number) => void,
  ): Promise<void> {
    const spans = new Map<string, PendingSpan>();
    for (const e of entries) {
      const c = e.chunk;
      if (!this.spanInBlob(c)) {
        e.reject(this.badToc('chunk compressed span outside the blob', c));
        continue;
      }
      const key = `${c.compressedOffset}:${c.compressedEnd}`;
      let s = spans.get(key);
      if (s === undefined) {
        s = { offset: c.compressedOffset, end: c.compressedEnd, entries: [] };
        spans.set(key, s);
      }
      s.entries.push(e);
    }
    if (spans.size === 0) return;
    const gap = priority === 'prefetch' ? this.ctx.prefetchMaxGap : this.ctx.maxGap;
    const all: PendingSpan[] = [...spans.values()];
    // read-around only rides along a request that goes to the network anyway
    if (priority === 'on-demand' && all.some((s) => !this.ctx.fetcher.holds(s.offset, s.end))) {
      const asked = all.map((s) => {
        const e = s.entries.find((x) => x.file !== undefined);
        return e === undefined ? s : { offset: s.offset, end: s.end, chunk: e.chunk, file: e.file };
      });
      for (const x of this.around.extra(asked)) all.push({ offset: x.offset, end: x.end, entries: [] });
    }
    const ranges = coalesce(all, gap);
    // the request stops once every waiter of every chunk in it has given up (read-around spans have
    // no waiters of their own)
    const signal = allAborted(all.flatMap((s) => s.entries.map((e) => e.waiters.abandoned)));
    const { bufs, release } = await this.ctx.fetcher.fetchLeased(
      ranges.map((r) => ({ offset: r.offset, length: r.length })),
      { priority, signal, onReceived },
    );
    const decodes: Array<Promise<void>> = [];
    try {
      ranges.forEach((r, i) => {
        const buf = bufs[i]!;
        for (const s of r.spans) {
          const span = buf.subarray(s.offset - r.offset, s.end - r.offset);
          // chunks sharing one member (same span) are decoded together: the member once
          if (s.entries.length > 1) decodes.push(this.decodeShared(span, s.entries, priority));
          else for (const e of s.entries) decodes.push(this.decodeOne(span, e, priority));
        }
      });
    } finally {
      // the spans go back once no decode reads them (inflate reads them on the thread pool until
      // its promise settles)
      await Promise.allSettled(decodes);
      release();
    }
  }

  private async decodeShared(span: Buffer, entries: Pending[], priority: Priority): Promise<void> {
    let results: Array<Buffer | StoreError>;
    try {
      results = await decodeChunks(
        this.ctx.compression,
        span,
        entries.map((e) => e.chunk),
        this.ctx.context,
      );
    } catch (err) {
      for (const e of entries) e.reject(asStoreError(err, 'E_DECOMPRESS', this.ctx.context));
      return;
    }
    entries.forEach((e, i) => {
      const r = results[i]!;
      if (r instanceof StoreError) e.reject(r);
      else this.deliver(e, r, priority);
    });
  }

  private deliver(e: Pending, data: Buffer, priority: Priority): void {
    const c = e.chunk;
    // A chunk whose compressed bytes the local store holds stays in memory only the first time it
    // is decoded: the background pass writes it to disk before those bytes go (layer fully
    // verified), and until then a miss decodes it from them. A file per chunk on the read path
    // cost a cold zstd:chunked model read (~7,400 chunks of 54 KiB per 400 MB: create + write +
    // rename each) about half its speed. A chunk decoded again left the memory LRU before its
    // readers were done (a 4 MiB chunk serves 32 FUSE reads): it goes to disk, so no chunk is
    // decoded more than twice.
    // A prefetched chunk goes to disk too: the prefetch caller drops the bytes, so the LRU can
    // release it when it leaves (it is on disk), and one the LRU does not keep is released after
    // the write unless a reader joined its load (then the collector frees it). Kept in memory
    // only, they waited for a collection (~16 MB of the optimised model-load peak), and kept out
    // of the LRU, a start-up read its landmark files from chunk files (run phase ~19 % slower;
    // bench/README.md session 19).
    const prefetched = priority === 'prefetch';
    const again = this.ctx.wasVerified?.(c) === true;
    const disk = prefetched || again || !this.ctx.fetcher.holdsLocally(c.compressedOffset, c.compressedEnd);
    this.ctx.onVerified(c);
    e.resolve(data);
    // Not awaited: the reader gets its bytes now; the cache write finishes on its own.
    this.ctx.cache.put(c.digest, data, { disk }).then(
      (kept) => {
        if (prefetched && !kept && !e.waiters.shared) releaseBuffer(data);
      },
      (err: unknown) => {
        this.ctx.logger.warn({ err, digest: c.digest }, 'chunk cache put failed');
      },
    );
  }

  private async decodeOne(span: Buffer, e: Pending, priority: Priority): Promise<void> {
    try {
      this.deliver(e, await decodeChunk(this.ctx.compression, span, e.chunk, this.ctx.context), priority);
    } catch (err) {
      e.reject(asStoreError(err, 'E_DECOMPRESS', this.ctx.context));
    }
  }
}
