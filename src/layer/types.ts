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
  /** One buffer per range, same order, each exactly `length` bytes; or a StoreError. */
  readRanges?(ranges: ByteRange[], signal?: AbortSignal): Promise<Buffer[]>;
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
  /** Share (0-100) of the layer's distinct chunk bytes verified and cached at some point. */
  percent: number;
  chunksVerified: number;
  /** Distinct non-zero chunks of the layer. */
  chunksTotal: number;
  prefetchDone: boolean;
  /** The background pass has visited every chunk. */
  backgroundDone: boolean;
  /** The whole decompressed stream matched the image config's diff_id. */
  fullyVerified: boolean;
  /** DiffID mismatch: every read fails with E_LAYER_BAD. */
  bad: boolean;
  lastError?: string;
  pinned: boolean;
}
