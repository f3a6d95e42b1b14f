/**
 * Lazy layer engine. Public API:
 *
 * - `new LazyLayer({ index, source, cache, layerKey, expectedDiffID?, scheduler?, deadlineMs?,
 *   prefetch?, prefetchBytes?, backgroundFetch?, stateDir?, ... })`
 *   - `start()`: prefetch (landmark / none / `prefetchBytes`), then background fetch + DiffID check.
 *   - `read(node, offset, length, { signal?, deadlineMs? }): Promise<Buffer>` (read-only result).
 *   - `state(): LayerState` (cheap, synchronous; `uncompressedSize` once the DiffID matched),
 *     `pin()`, `unpin()`, `whenPrefetched()`, `whenBackgroundDone()`, `close()`,
 *     `loadChunks(chunks, { priority, signal })` (e.g. read-ahead at the prefetch tier).
 * - `FetchScheduler`: one per store, shared by all layers (on-demand work preempts background;
 *   `hashConcurrency` bounds the DiffID passes store-wide; `quietMs`, `bandwidthBytesPerSec` and an
 *   injectable `clock` make background work yield).
 * - `BlobSource`: the blob-read contract (`readRanges(ranges, { signal, bypassCache })`,
 *   util/blob-read.ts) or a plain RangeReader; `bypassCache` is set on the DiffID re-check pass.
 * - `SpanFetcher` (one per layer): the in-flight table of compressed spans; every fetch of the
 *   layer goes through it. Seam for a local compressed store: `localBytes` / `onCompressedBytes`
 *   (compressed-store.ts).
 *
 * Errors: E_DEADLINE, E_ABORTED, E_LAYER_BAD, E_BAD_TOC, E_INVALID_ARGUMENT, E_DIGEST_MISMATCH,
 * E_DECOMPRESS, E_TRUNCATED and whatever the source throws (E_REGISTRY_*).
 */
export { LazyLayer, type LazyLayerOptions } from './lazy-layer.js';
export { FetchScheduler, Preempted, type SchedulerOptions, type SchedulerStats } from './scheduler.js';
export { StreamDigest } from './diffid.js';
export { coalesce, type Span, type CoalescedRange } from './ranges.js';
export { planLayerAsync, planUnits, type LayerPlan, type FetchUnit } from './plan.js';
export type { BlobSource, ByteRange, LayerState, ReadOptions, ReadRangesOptions } from './types.js';
export { SpanFetcher, type Priority, type SpanFetchOptions } from './span-fetcher.js';
export type { LocalCompressedBytes, CompressedBytesSink } from './compressed-store.js';
export type { LoadOptions } from './chunk-loader.js';
