/**
 * Lazy layer engine. Public API:
 *
 * - `new LazyLayer({ index, source, cache, layerKey, expectedDiffID?, scheduler?, deadlineMs?,
 *   prefetch?, prefetchBytes?, backgroundFetch?, stateDir?, ... })`
 *   - `start()`: prefetch (landmark / none / `prefetchBytes`), then background fetch + DiffID check.
 *   - `read(node, offset, length, { signal?, deadlineMs? }): Promise<Buffer>` (read-only result).
 *   - `state(): LayerState`, `pin()`, `unpin()`, `whenPrefetched()`, `whenBackgroundDone()`, `close()`.
 * - `FetchScheduler`: one per store, shared by all layers (on-demand work preempts background).
 * - `BlobSource`: a RangeReader with an optional `readRanges` (the registry BlobReader fits).
 *
 * Errors: E_DEADLINE, E_ABORTED, E_LAYER_BAD, E_BAD_TOC, E_INVALID_ARGUMENT, E_DIGEST_MISMATCH,
 * E_DECOMPRESS, E_TRUNCATED and whatever the source throws (E_REGISTRY_*).
 */
export { LazyLayer, type LazyLayerOptions } from './lazy-layer.js';
export { FetchScheduler, Preempted, type SchedulerOptions, type SchedulerStats } from './scheduler.js';
export { StreamDigest } from './diffid.js';
export { coalesce, type Span, type CoalescedRange } from './ranges.js';
export { planLayer, planLayerAsync, planUnits, type LayerPlan, type FetchUnit } from './plan.js';
export type { BlobSource, ByteRange, LayerState, ReadOptions } from './types.js';
