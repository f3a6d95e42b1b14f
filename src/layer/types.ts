import type { RangeReader } from '../util/range-reader.js';

export interface ByteRange {
  offset: number;
  length: number;
}

/**
 * Where a layer's compressed bytes come from: a registry blob reader, a local file, a test
 * buffer. `readRanges` (multi-range request) is optional; without it each range is read alone.
 */
export interface BlobSource extends RangeReader {
  /**
   * One buffer per range, same order, each exactly `length` bytes; or a StoreError. With
   * `opts.fresh` the bytes should come from the origin, not from a cache of compressed bytes
   * (sources without such a cache ignore it).
   */
  readRanges?(ranges: ByteRange[], signal?: AbortSignal, opts?: FetchOptions): Promise<Buffer[]>;
  /** `read` receives the same optional third argument. */
  read(offset: number, length: number, signal?: AbortSignal, opts?: FetchOptions): Promise<Buffer>;
}

export interface FetchOptions {
  /** Bypass any cache of compressed bytes (re-check after a DiffID mismatch). */
  fresh?: boolean;
}

export interface ReadOptions {
  signal?: AbortSignal;
  /** Overrides the layer's default deadline (ms) for this read. */
  deadlineMs?: number;
}

export interface LayerState {
  /** Compressed bytes received from the source by this layer (on-demand + prefetch + background). */
  bytesFetched: number;
  /** Compressed blob size. */
  totalBytes: number;
  /**
   * Share (0-100) of the layer's distinct chunk bytes verified and cached at some point; 0 until
   * the chunk plan exists (built asynchronously by start() or pin(), never by state()).
   */
  percent: number;
  chunksVerified: number;
  /** Distinct non-zero chunks of the layer; 0 until the chunk plan exists. */
  chunksTotal: number;
  prefetchDone: boolean;
  /** The background pass has visited every chunk. */
  backgroundDone: boolean;
  /** The whole decompressed stream matched the image config's diff_id. */
  fullyVerified: boolean;
  /** DiffID mismatch: every read fails with E_LAYER_BAD. */
  bad: boolean;
  /**
   * Length of the decompressed layer (the DiffID stream, i.e. the tar's size), known once a
   * background pass matched the diff_id (or from persisted state); undefined before.
   */
  uncompressedSize?: number;
  lastError?: string;
  pinned: boolean;
}
