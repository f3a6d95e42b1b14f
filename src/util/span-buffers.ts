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
 */
export const SPAN_BUFFER_DEFAULTS: Readonly<SpanBufferOptions> = Object.freeze({
  minPooled: 1 * MiB,
  maxPooled: 32 * MiB,
  maxFree: 8 * MiB,
  idleMs: 2000,
  now: () => performance.now(),
});

export class SpanBuffers {
  private readonly o: SpanBufferOptions;
  /** Free buffers by size (whole MiBs). */
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
    const size = Math.ceil(length / MiB) * MiB;
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
