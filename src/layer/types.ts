import type { BlobRangeSource, ByteRange, ReadRangesOptions } from '../util/blob-read.js';
import type { RangeReader } from '../util/range-reader.js';

export type { ByteRange, ReadRangesOptions };

/**
 * Where a layer's compressed bytes come from: the blob-read contract (util/blob-read.ts: registry
 * blob reader, local file, test buffer). LazyLayer also takes a plain RangeReader, read through
 * the single-read fallback.
 */
export interface BlobSource extends RangeReader, BlobRangeSource {}

export interface ReadOptions {
  signal?: AbortSignal;
  /** Overrides the layer's default deadline (ms) for this read. */
  deadlineMs?: number;
  /**
   * The caller copies the bytes out before the event loop turns (the FUSE answer): the result may
   * then be a view of a cached chunk buffer, which the cache releases once it drops the chunk
   * (ChunkCache.retire; the view is empty afterwards). Without it the result is the caller's own.
   */
  transient?: boolean;
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
