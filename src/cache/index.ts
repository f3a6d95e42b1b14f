/**
 * Content-addressed chunk cache. Public API:
 *
 * - `ChunkCache.open({ root, maxBytes?, minFreeBytes?, maxEntries?, memoryBytes?, logger? })`
 *   (returns before the start-up index scan finishes; `whenScanned()` waits for it).
 * - `get(digest): Promise<Buffer | undefined>` (sha256-verified on every disk read),
 *   `getMemory(digest)`, `has(digest)`, `put(digest, verifiedBytes)`.
 * - `pin(layerKey, digests)`, `unpin(layerKey)`, `isPinned(layerKey)`.
 * - `stats()`, `flush()`, `close()`, `dropMemory()`, `reserveExternal()` / `releaseExternal()`.
 *
 * Blob store (compressed bytes kept until a layer is verified, see blob-store.ts):
 * `BlobStore.open({ root, budget: chunkCacheBudget(cache) })`, `openBlob(digest, size)` ->
 * `LocalBlob` (`covered`, `held`, `missing`, `read`, `write`, `onCompressedBytes`, `complete`,
 * `invalidate`, `flush`), `remove(digest)`, `close()`.
 */
export { ChunkCache, footprint, type ChunkCacheOptions, type ChunkCacheStats } from './chunk-cache.js';
export { digestHex, isSha256Digest } from './paths.js';
export { BlobStore, type BlobStoreOptions, type BlobStoreStats } from './blob-store.js';
export { chunkCacheBudget, type DiskBudget } from './blob-files.js';
export { LocalBlob } from './local-blob.js';
export { IntervalSet, type Interval } from './interval-set.js';
