const MiB = 1024 * 1024;

/**
 * Writes of at least this many bytes skip the page cache (O_DIRECT, util/direct-write.ts) while
 * their kind (large chunk files; the local compressed bytes) is being written at DIRECT_MIN_RATE
 * or faster: a loopback model read, a fast background pass. The reasons, measured, are at
 * ChunkCache's use (cache/chunk-cache.ts) and LocalBlob's (cache/local-blob.ts). Smaller writes
 * always go through the page cache: a direct write costs a disk round trip each.
 */
export const DIRECT_MIN_BYTES = 1 * MiB;
/** See DIRECT_MIN_BYTES: bytes per second over the last second. */
export const DIRECT_MIN_RATE = 32 * MiB;

/**
 * Bytes written over the last `windowMs` (a sliding window of marks): how fast one kind of file is
 * being filled right now, which decides whether its large writes skip the page cache.
 */
export class WriteRate {
  private readonly marks: Array<{ at: number; bytes: number }> = [];
  private total = 0;

  constructor(
    private readonly now: () => number,
    private readonly windowMs = 1000,
  ) {}

  add(bytes: number): void {
    const at = this.now();
    this.marks.push({ at, bytes });
    this.total += bytes;
    this.trim(at);
  }

  /** Bytes per second over the window. */
  perSecond(): number {
    this.trim(this.now());
    return (this.total * 1000) / this.windowMs;
  }

  private trim(at: number): void {
    while (this.marks.length > 0 && this.marks[0]!.at <= at - this.windowMs)
      this.total -= this.marks.shift()!.bytes;
  }
}
