/**
 * Lazy layer engine. Public API:
 *
 * - `new LazyLayer({ index, source, cache, layerKey, expectedDiffID?, scheduler?, deadlineMs?,
 *   prefetch?, prefetchBytes?, backgroundFetch?, stateDir?, ... })`
 *   - `start()`: prefetch (landmark / none / `prefetchBytes`), then background fetch + DiffID check.
 *   - `read(node, offset, length, { signal?, deadlineMs? }): Promise<Buffer>` (read-only result).
 *   - `state(): LayerState` (cheap, synchronous; `uncompressedSize` once the DiffID matched),
 *     `pin()`, `unpin()`, `whenPrefetched()`, `whenBackgroundDone()`, `close()`.
 * - `FetchScheduler`: one per store, shared by all layers (on-demand work preempts background;
 *   `hashConcurrency` bounds the DiffID passes, each holding one worker thread, store-wide).
 * - `BlobSource`: a RangeReader with an optional `readRanges` (the registry BlobReader fits); both
 *   may receive `{ fresh: true }` (bypass cached compressed bytes) on a DiffID re-check pass.
 *
 * Errors: E_DEADLINE, E_ABORTED, E_LAYER_BAD, E_BAD_TOC, E_INVALID_ARGUMENT, E_DIGEST_MISMATCH,
 * E_DECOMPRESS, E_TRUNCATED and whatever the source throws (E_REGISTRY_*).
 */
export { LazyLayer, type LazyLayerOptions } from './lazy-layer.js';
export { FetchScheduler, Preempted, type SchedulerOptions, type SchedulerStats } from './scheduler.js';
export { StreamDigest } from './diffid.js';
export { coalesce, type Span, type CoalescedRange } from './ranges.js';
export { planLayerAsync, planUnits, type LayerPlan, type FetchUnit } from './plan.js';
export type { BlobSource, ByteRange, FetchOptions, LayerState, ReadOptions } from './types.js';
