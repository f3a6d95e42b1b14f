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
  /**
   * Free bytes kept for reuse; beyond it the buffers given back longest ago are released (so an odd
   * size, an on-demand span of 9 MiB, never holds the room the steady 5 MiB spans need).
   */
  maxFree: number;
  /**
   * Free buffers are released once the pool was not used for this long (ms): no free buffer taken
   * and none kept. An idle store keeps none, nor does one whose only traffic is the background
   * pass (its spans are never kept, layer/span-fetcher.ts, and its takes of other sizes must not
   * keep the free ones resident: ten layers mounted peaked 156 vs 148-153 MB, session 29).
   */
  idleMs: number;
  /** Monotonic ms (tests inject one). */
  now: () => number;
}

/**
 * Sizes: a read-ahead step's span is a 4 MiB eStargz chunk's compressed bytes (a 5 MiB buffer)
 * and two steps are in flight per file (layer/read-ahead.ts, capped by the memory LRU). Free
 * buffers are resident memory: 8 MiB of them kept a cold 120 MiB shard read's peak RSS unchanged
 * (159 vs 160 MB) at 107 vs 102 MB/s (main thread 760 vs 800 ms, same-run medians of 6); 24 MiB
 * read at 103 vs 97 MB/s but peaked 11 MB higher. 8 MiB held one 5 MiB span: 12 of 27 takes of
 * a cold shard read were fresh mappings (15 of 27 once a 9 MiB on-demand span sat in the free
 * list); 10 MiB, the oldest released first, took 5-6 of 28 fresh (session 29).
 */
export const SPAN_BUFFER_DEFAULTS: Readonly<SpanBufferOptions> = Object.freeze({
  minPooled: 1 * MiB,
  maxPooled: 32 * MiB,
  maxFree: 10 * MiB,
  idleMs: 2000,
  now: () => performance.now(),
});

export class SpanBuffers {
  private readonly o: SpanBufferOptions;
  /** Free buffers (sizes in whole MiBs), given back longest ago first. */
  private readonly free: ArrayBuffer[] = [];
  private freeTotal = 0;
  /** Length each buffer handed out was taken for: only a view of exactly that is given back. */
  private readonly taken = new WeakMap<ArrayBufferLike, number>();
  private lastUse = 0;
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
    if (length < this.o.minPooled || length > this.o.maxPooled) {
      // allocUnsafeSlow: never a slice of Node's shared allocation pool
      const b = Buffer.allocUnsafeSlow(length);
      this.taken.set(b.buffer, length);
      return b;
    }
    const size = Math.ceil(length / MiB) * MiB;
    // the most recently given back of that size: its pages are the likeliest still cached
    const at = this.free.findLastIndex((b) => b.byteLength === size);
    const ab = at >= 0 ? this.free.splice(at, 1)[0] : undefined;
    if (ab !== undefined) {
      this.freeTotal -= size;
      this.lastUse = this.o.now();
    }
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
      size > this.o.maxFree
    ) {
      return releaseBuffer(Buffer.from(ab));
    }
    this.free.push(ab as ArrayBuffer);
    this.freeTotal += size;
    this.lastUse = this.o.now();
    while (this.freeTotal > this.o.maxFree) {
      const old = this.free.shift()!;
      this.freeTotal -= old.byteLength;
      releaseBuffer(Buffer.from(old));
    }
    // reused memory is no garbage: no collection needed for it
    gcPacer.gaveBack(length);
    this.armTrim();
    return true;
  }

  /** Release every free buffer. */
  trim(): void {
    for (const ab of this.free) releaseBuffer(Buffer.from(ab));
    this.free.length = 0;
    this.freeTotal = 0;
  }

  private armTrim(): void {
    if (this.timer !== undefined) return;
    const check = (): void => {
      this.timer = undefined;
      if (this.freeTotal === 0) return;
      const idle = this.o.now() - this.lastUse;
      if (idle >= this.o.idleMs) this.trim();
      else this.timer = setTimeout(check, this.o.idleMs - idle).unref();
    };
    this.timer = setTimeout(check, this.o.idleMs).unref();
  }
}

/** The process's span buffers (the registry client takes, the span fetcher gives back). */
export const spanBuffers = new SpanBuffers();
