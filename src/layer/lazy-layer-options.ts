import type { ChunkCache } from '../cache/chunk-cache.js';
import type { LayerIndex } from '../format/model.js';
import type { Logger } from '../util/logger.js';
import type { RangeReader } from '../util/range-reader.js';
import type { LocalCompressedStore } from './compressed-store.js';
import type { FetchScheduler } from './scheduler.js';
import type { BlobSource } from './types.js';

/** What a LazyLayer is built from, and its tuning (defaults in lazy-layer.ts). */
export interface LazyLayerOptions {
  index: LayerIndex;
  /** A plain RangeReader is read through the single-read fallback. */
  source: BlobSource | RangeReader;
  cache: ChunkCache;
  /** Stable id for pins, logs and persisted state (e.g. the blob digest). */
  layerKey: string;
  /** The image config's rootfs.diff_ids entry; enables the whole-layer DiffID check. */
  expectedDiffID?: string;
  /** Share one scheduler across all layers of a store so on-demand reads preempt every layer. */
  scheduler?: FetchScheduler;
  /** Default per-read deadline. Default 30 000 ms. */
  deadlineMs?: number;
  /** Run the prefetch at start(). Default true. */
  prefetch?: boolean;
  /** Compressed prefix to prefetch when the layer has no landmark. Default 0. */
  prefetchBytes?: number;
  /**
   * Compressed bytes per prefetch batch (two batches in flight). Default 4 MiB: an on-demand read
   * inside a batch in flight waits for that batch's request to complete, so batches stay small.
   */
  prefetchBatchBytes?: number;
  /** Fetch the whole layer in the background after the prefetch. Default true. */
  backgroundFetch?: boolean;
  /**
   * Compressed bytes per background request. Default 2 MiB: a preempted unit loses at most this
   * much work, and window x unit bounds the pass's memory.
   */
  backgroundUnitBytes?: number;
  /** Background units of this layer in flight at once. Default 2. */
  backgroundWindow?: number;
  /** Missing spans of an on-demand read closer than this are fetched as one range. Default 4096. */
  maxGap?: number;
  /** Prefetch spans closer than this are fetched as one range. Default 1 MiB. */
  prefetchMaxGap?: number;
  /**
   * Local compressed bytes (the resume store): asked before the network, given every byte fetched
   * from the network once, told when the layer is verified and before a re-check from the origin.
   */
  local?: LocalCompressedStore;
  /** Directory for persisted layer state (DiffID verified); none: nothing persisted. */
  stateDir?: string;
  /** Delay before retrying a failed background pass (multiplied by the attempt). Default 30 s. */
  retryDelayMs?: number;
  /** Background passes before giving up. Default 3. */
  maxBackgroundPasses?: number;
  logger?: Logger;
}
