/**
 * Paces major garbage collections by the bytes of large buffers the store allocates.
 *
 * The store's memory churn is Buffers (compressed spans, decoded chunks, socket reads), not the
 * JavaScript heap (~26 MB live): V8 sees that memory only as "external" bytes, which it adds to
 * the old generation's allocation count, so with incremental marking a streaming read kept V8
 * marking almost without a pause (15-18 major GCs and ~0.7 s of helper-thread CPU per 120 MiB
 * shard read cold on 2 cores). bin/node-options turns incremental marking off: V8 then collects
 * atomically at its limits, and this pacer adds a full GC after every GC_PACE_BYTES of decoded
 * data (compressed span + decoded bytes), so dead buffers never pile up beyond a few chunks.
 * Without `gc` exposed (tests, tools run without --expose-gc) it does nothing.
 */

const MiB = 1024 * 1024;

/**
 * Bytes (compressed + decoded) between two paced collections. Measured against the previous build,
 * same run, large lab image at scale 0.3, loopback (bench/README.md, session 13): 16 MiB cut the
 * peak RSS of a cold 120 MiB shard read by 21 MB through the mount (192 -> 171 MB, 5 runs) and in
 * the harness's model-load by 0-20 MB (zstd:chunked 193-212 -> 177-188), at an unchanged read rate.
 */
export const GC_PACE_BYTES = 16 * MiB;

export class GcPacer {
  private since = 0;

  constructor(
    private readonly paceBytes: number,
    private readonly collect: (() => void) | undefined,
  ) {}

  /** `bytes` of large buffers were just allocated (and will soon be garbage). */
  note(bytes: number): void {
    if (this.collect === undefined || !(bytes > 0)) return;
    this.since += bytes;
    if (this.since < this.paceBytes) return;
    this.since = 0;
    this.collect();
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
);
