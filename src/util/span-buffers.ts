import { gcPacer } from './gc-pacer.js';
import { releaseBuffer } from './release-buffer.js';

/**
 * Buffers a producer makes for one caller and keeps no reference to (the registry client's range
 * bodies), which the caller gives back once nobody reads them (layer/span-fetcher.ts). Large ones
 * are reused instead of freed: a fresh multi-MiB buffer is a fresh mapping, and filling it from the
 * socket cost a cold model read ~200 ms of page faults per 120 MiB on the main thread (the copy
 * into it ran at ~600 MB/s). Small ones are released (util/release-buffer.ts). The blob-read
 * contract lets sources return views of memory they share (a held TOC tail, a test blob): buffers
 * not taken here are never given back by a consumer.
 */

const MiB = 1024 * 1024;

export interface SpanBufferOptions {
  /** Smallest length served from reused buffers (smaller: plain allocations). */
  minPooled: number;
  /** Largest length served from reused buffers (larger: plain allocations). */
  maxPooled: number;
  /** Free bytes kept for reuse; buffers given back beyond it are released. */
  maxFree: number;
  /**
   * Pooled buffers are this many bytes long at least and a multiple of it (one free list per
   * size): 1 MiB for compressed spans, whose lengths vary; 1 for decoded chunks, whose lengths
   * are mostly the layer's chunk size, kept exact so a cached chunk holds no slack.
   */
  granularity: number;
  /** Free buffers are released once none was taken for this long (ms): an idle store keeps none. */
  idleMs: number;
  /** Monotonic ms (tests inject one). */
  now: () => number;
}

/**
 * Sizes: a read-ahead step's span is ~4 MiB of compressed bytes and at most 12 MiB are in flight
 * per file (layer/read-ahead.ts). Free buffers are resident memory: 8 MiB of them kept a cold
 * 120 MiB shard read's peak RSS unchanged (159 vs 160 MB) at 107 vs 102 MB/s (main thread 760 vs
 * 800 ms, same-run medians of 6); 24 MiB read at 103 vs 97 MB/s but peaked 11 MB higher.
 * Session 28, with decoded chunks in reused buffers too (`chunkBuffers`): 16 MiB (three ~5 MiB
 * spans; 12 MiB peaked higher, not lower, in the same run) read at 128-149 vs 110-128 MB/s for
 * 8 MiB, peak 132-137 MB vs 127-135 (3 runs each); with 8 MiB a miss in every four spans still
 * filled a fresh mapping from the socket.
 */
export const SPAN_BUFFER_DEFAULTS: Readonly<SpanBufferOptions> = Object.freeze({
  minPooled: 1 * MiB,
  maxPooled: 32 * MiB,
  maxFree: 16 * MiB,
  granularity: MiB,
  idleMs: 2000,
  now: () => performance.now(),
});

export class SpanBuffers {
  private readonly o: SpanBufferOptions;
  /** Free buffers by size (multiples of the granularity). */
  private readonly free = new Map<number, ArrayBuffer[]>();
  private freeTotal = 0;
  /** Length each buffer handed out was taken for: only a view of exactly that is given back. */
  private readonly taken = new WeakMap<ArrayBufferLike, number>();
  private lastTake = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(opts: Partial<SpanBufferOptions> = {}) {
    this.o = { ...SPAN_BUFFER_DEFAULTS, ...opts };
  }

  /** Free bytes kept for reuse (tests, metrics). */
  get freeBytes(): number {
    return this.freeTotal;
  }

  /** A buffer of `length` bytes (contents undefined) for one caller, who may `giveBack` it. */
  take(length: number): Buffer {
    this.lastTake = this.o.now();
    if (length < this.o.minPooled || length > this.o.maxPooled) {
      // allocUnsafeSlow: never a slice of Node's shared allocation pool
      const b = Buffer.allocUnsafeSlow(length);
      this.taken.set(b.buffer, length);
      return b;
    }
    const g = this.o.granularity;
    const size = Math.ceil(length / g) * g;
    const ab = this.free.get(size)?.pop();
    if (ab !== undefined) this.freeTotal -= size;
    const buf = ab ?? Buffer.allocUnsafeSlow(size).buffer;
    this.taken.set(buf, length);
    return Buffer.from(buf, 0, length);
  }

  /**
   * The last holder of `buf` gives it back: kept for reuse, or released. Only a buffer taken here,
   * as a view of all of it; false (nothing done) for any other. The caller must hold the only
   * reference that will ever be used again: a stale view of a reused buffer reads other bytes.
   */
  giveBack(buf: Buffer, opts: { reuse?: boolean } = {}): boolean {
    const ab = buf.buffer;
    const length = this.taken.get(ab);
    if (length === undefined || buf.byteOffset !== 0 || buf.length !== length) return false;
    this.taken.delete(ab);
    const size = ab.byteLength;
    if (
      opts.reuse === false ||
      length < this.o.minPooled ||
      length > this.o.maxPooled ||
      this.freeTotal + size > this.o.maxFree
    ) {
      return releaseBuffer(Buffer.from(ab));
    }
    let list = this.free.get(size);
    if (list === undefined) this.free.set(size, (list = []));
    list.push(ab as ArrayBuffer);
    this.freeTotal += size;
    // reused memory is no garbage: no collection needed for it
    gcPacer.gaveBack(length);
    this.armTrim();
    return true;
  }

  /** Release every free buffer. */
  trim(): void {
    for (const list of this.free.values()) for (const ab of list) releaseBuffer(Buffer.from(ab));
    this.free.clear();
    this.freeTotal = 0;
  }

  private armTrim(): void {
    if (this.timer !== undefined) return;
    const check = (): void => {
      this.timer = undefined;
      if (this.freeTotal === 0) return;
      const idle = this.o.now() - this.lastTake;
      if (idle >= this.o.idleMs) this.trim();
      else this.timer = setTimeout(check, this.o.idleMs - idle).unref();
    };
    this.timer = setTimeout(check, this.o.idleMs).unref();
  }
}

/** The process's span buffers (the registry client takes, the span fetcher gives back). */
export const spanBuffers = new SpanBuffers();

/**
 * Reused buffers for decoded chunks of 1 MiB and more (format/codec-inflate.ts takes them, the
 * chunk cache gives them back when a chunk leaves its memory LRU: `releaseChunkBuffer`). In this
 * VM a fresh page is a fault: inflating a cold model read's 4 MiB chunks into fresh buffers took
 * ~10 % of the store's CPU in faults alone, more in the slower copy (bench/README.md, session 28).
 * One free 4 MiB buffer: 8 MiB read no faster in the harness's model load and peaked 4-8 MB higher
 * (the optimised image's model load then passed 150 MB).
 */
export const chunkBuffers = new SpanBuffers({ maxFree: 4 * MiB, granularity: 1 });

/**
 * The last holder of a decoded chunk's buffer is done with it: back to `chunkBuffers` when it came
 * from there, else released (util/release-buffer.ts). Same rule as both: no view of it may be used
 * again (a stale view of a reused buffer would read another chunk's bytes).
 */
export function releaseChunkBuffer(buf: Buffer): boolean {
  return chunkBuffers.giveBack(buf) || releaseBuffer(buf);
}
