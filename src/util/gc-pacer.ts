/**
 * Paces major garbage collections by the bytes of large buffers the store allocates.
 *
 * The store's memory churn is Buffers (compressed spans, decoded chunks, socket reads), not the
 * JavaScript heap (~26 MB live): V8 sees that memory only as "external" bytes, which it adds to
 * the old generation's allocation count, so with incremental marking a streaming read kept V8
 * marking almost without a pause (15-18 major GCs and ~0.7 s of helper-thread CPU per 120 MiB
 * shard read cold on 2 cores). bin/node-options turns incremental marking off: V8 then collects
 * atomically at its limits, and this pacer adds a full GC after every GC_PACE_BYTES of decoded
 * data, so dead buffers never pile up beyond a few chunks. Every decompression of layer data
 * reports here: chunks (format/codec.ts: compressed span + decoded bytes) and the DiffID check's
 * whole-layer stream (layer/diffid.ts: decoded bytes).
 * Without `gc` exposed (tests, tools run without --expose-gc) it does nothing.
 */

import { getHeapStatistics } from 'node:v8';

const MiB = 1024 * 1024;

/**
 * Bytes (compressed + decoded) between two paced collections. Measured against the previous build,
 * same run, large lab image at scale 0.3, loopback (bench/README.md, session 13): peak RSS of a cold
 * 120 MiB shard read through the mount 192-193 -> 170-171 MB (2 A/Bs of 4-5 runs), read rate 83-86
 * vs 87-88 MB/s (the machine's spread: +-10 %); 32 MiB kept the old peak (192 MB) at 93 MB/s.
 * Harness model-load: zstd:chunked 193-212 -> 177-188 MB, eStargz unchanged.
 */
export const GC_PACE_BYTES = 16 * MiB;

export class GcPacer {
  private since = 0;
  /** Counted bytes at which the pace (and the heap) is looked at again. */
  private due: number;

  /**
   * `heapBytes`: the live JavaScript heap. A full GC costs in proportion to it (a 500,000-entry
   * TOC is a 300 MB heap, 250 ms a collection), so collections come at most once per half a heap
   * of counted bytes: a store holding huge TOCs is not paused every 16 MiB of a model read.
   */
  constructor(
    private readonly paceBytes: number,
    private readonly collect: (() => void) | undefined,
    private readonly heapBytes: () => number = () => 0,
  ) {
    this.due = paceBytes;
  }

  /**
   * `bytes` of large buffers were just allocated (and will soon be garbage). Called once per
   * decompression: the heap's size is read only when the count reaches `due`, at most twice per
   * collection.
   */
  note(bytes: number): void {
    if (this.collect === undefined || !(bytes > 0)) return;
    this.since += bytes;
    if (this.since < this.due) return;
    const due = Math.max(this.paceBytes, this.heapBytes() / 2);
    if (this.since < due) {
      this.due = due;
      return;
    }
    this.since = 0;
    this.due = this.paceBytes;
    this.collect();
  }

  /**
   * `bytes` counted by `note` were given back already (util/release-buffer.ts freed them): they
   * need no collection. So memory the store releases itself does not bring the next full GC
   * nearer; only garbage left to V8 does. A buffer is counted when it is made and given back when
   * its last reader is done, often after a collection reset the count: the count may then go
   * below zero, down to one pace, a credit for the buffers counted before and released since.
   */
  gaveBack(bytes: number): void {
    if (!(bytes > 0)) return;
    this.since = Math.max(-this.paceBytes, this.since - bytes);
  }

  /**
   * Collect now if any counted bytes wait for a collection: for garbage made while the store goes
   * idle (no decoding follows to reach the pace, so it would otherwise stay until the next burst).
   * True when it collected.
   */
  collectPending(): boolean {
    if (this.collect === undefined || this.since <= 0) return false;
    this.since = 0;
    this.due = this.paceBytes;
    this.collect();
    return true;
  }

  /** Bytes counted since the last paced collection (tests). */
  get pending(): number {
    return this.since;
  }
}

/** The process's pacer: collects with the `gc` that `--expose-gc` puts on the global object. */
export const gcPacer = new GcPacer(
  GC_PACE_BYTES,
  (globalThis as { gc?: () => void }).gc !== undefined
    ? () => (globalThis as unknown as { gc: () => void }).gc()
    : undefined,
  () => getHeapStatistics().used_heap_size,
);
