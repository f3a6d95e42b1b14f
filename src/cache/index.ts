/**
 * Content-addressed chunk cache. Public API:
 *
 * - `ChunkCache.open({ root, maxBytes?, minFreeBytes?, maxEntries?, memoryBytes?, logger? })`
 *   (returns before the start-up index scan finishes; `whenScanned()` waits for it).
 * - `get(digest): Promise<Buffer | undefined>` (sha256-verified on every disk read),
 *   `getMemory(digest)`, `has(digest)`, `put(digest, verifiedBytes)`.
 * - `pin(layerKey, digests)`, `unpin(layerKey)`, `isPinned(layerKey)`.
 * - `stats()`, `flush()`, `close()`, `dropMemory()`.
 */
export { ChunkCache, footprint, type ChunkCacheOptions, type ChunkCacheStats } from './chunk-cache.js';
export { digestHex, isValidDigest } from './paths.js';
