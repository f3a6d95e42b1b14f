import { mapLimit } from './async.js';
import { StoreError, type ErrorContext } from './errors.js';
import { BufferRangeReader, FileRangeReader, type RangeReader } from './range-reader.js';

/** Half-open byte range [offset, offset+length) of a blob. */
export interface ByteRange {
  offset: number;
  length: number;
}

export interface ReadRangesOptions {
  signal?: AbortSignal | undefined;
  /**
   * The bytes must come from the origin: bypass every cache of compressed bytes on the way (the
   * local compressed-bytes store, any block cache). The DiffID re-check asks for this, so a
   * corrupted local copy cannot condemn a good layer.
   */
  bypassCache?: boolean | undefined;
  /**
   * Optional: told of blob bytes [offset, offset + data.length) as they arrive, before the call
   * resolves (sources that stream single-range answers do; others may never call it). `data` is
   * a view of memory that is never written again (the call's result buffer): it may be kept
   * without copying. A caller that gives up keeps what it was told of.
   */
  onProgress?: ((offset: number, data: Buffer) => void) | undefined;
}

/**
 * THE contract for "read bytes of a blob" (registry blob, local file, test buffer). One buffer
 * per range, same order, each exactly `length` bytes, or a StoreError; never short or misplaced
 * data. Returned buffers may be views of shared memory: treat them as read-only. Sources that can
 * fetch several ranges in one request do so; the others use `readEach` (the single-read fallback).
 */
export interface BlobRangeSource {
  readonly size: number;
  readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]>;
}

/** Parallel single reads when a reader cannot fetch several ranges at once. */
export const SINGLE_READ_CONCURRENCY = 8;

/**
 * The single-read fallback, written once: `read` each range, at most `concurrency` at a time;
 * the first failure stops handing out new reads and is reported.
 */
export function readEach(
  ranges: readonly ByteRange[],
  read: (r: ByteRange) => Promise<Buffer>,
  concurrency = SINGLE_READ_CONCURRENCY,
): Promise<Buffer[]> {
  return mapLimit(ranges, concurrency, read);
}

/** Throws E_TRUNCATED unless every buffer has exactly its range's length. */
export function checkLengths(ranges: readonly ByteRange[], bufs: readonly Buffer[], ctx: ErrorContext): void {
  if (bufs.length !== ranges.length) {
    throw new StoreError('E_TRUNCATED', 'blob source returned the wrong number of ranges', {
      ...ctx,
      expected: ranges.length,
      got: bufs.length,
    });
  }
  for (let i = 0; i < ranges.length; i++) {
    if (bufs[i]?.length !== ranges[i]!.length) {
      throw new StoreError('E_TRUNCATED', 'blob source returned a short range', {
        ...ctx,
        offset: ranges[i]!.offset,
        length: ranges[i]!.length,
      });
    }
  }
}

/**
 * A RangeReader (local file, buffer, any single-range reader) as a BlobRangeSource: the one
 * adapter. Such readers hold no cache of compressed bytes, so `bypassCache` needs nothing here.
 */
export class ReaderSource implements BlobRangeSource, RangeReader {
  constructor(
    private readonly reader: RangeReader,
    private readonly concurrency = SINGLE_READ_CONCURRENCY,
  ) {}

  get size(): number {
    return this.reader.size;
  }

  read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    return this.reader.read(offset, length, signal);
  }

  readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    return readEach(ranges, (r) => this.reader.read(r.offset, r.length, opts.signal), this.concurrency);
  }
}

/** A test or in-memory blob. */
export function bufferSource(buf: Buffer): ReaderSource {
  return new ReaderSource(new BufferRangeReader(buf));
}

/** A local blob file (close it with `close()`). */
export async function fileSource(path: string): Promise<ReaderSource & { close(): Promise<void> }> {
  const reader = await FileRangeReader.open(path);
  return Object.assign(new ReaderSource(reader), { close: () => reader.close() });
}

/**
 * Duck-typed adapter for callers that hold "a RangeReader that may also read ranges" (the store
 * passes its blob as a RangeReader): the source itself when it implements the contract, else the
 * single-read fallback.
 */
export function asBlobSource(r: BlobRangeSource | (RangeReader & Partial<BlobRangeSource>)): BlobRangeSource {
  return typeof r.readRanges === 'function' ? (r as BlobRangeSource) : new ReaderSource(r as RangeReader);
}

/** The other direction, for format/ (which reads through RangeReader.read). */
export function asRangeReader(src: BlobRangeSource & Partial<RangeReader>): RangeReader {
  if (typeof src.read === 'function') return src as RangeReader;
  return {
    get size() {
      return src.size;
    },
    async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
      const [b] = await src.readRanges([{ offset, length }], { signal });
      return b!;
    },
  };
}
