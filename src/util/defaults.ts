/**
 * Defaults that lower layers (cache/, layer/ ...) also fall back to when a caller (a test, a bench)
 * leaves an option out. The config schema (src/store/config/schema.ts) declares its defaults from
 * these constants, so each number exists once; everything else defaults in the schema only.
 */

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

/** `[cache]`: disk bound of the chunk cache, free-space margin, in-memory LRU in front of it. */
export const CACHE_DEFAULTS = {
  maxBytes: 10 * GiB,
  minFreeBytes: 1 * GiB,
  /**
   * Verified chunks only: the kernel page cache holds file pages, and a chunk served whole leaves
   * (ChunkCache.consumed), so the LRU holds chunks read ahead and chunks partly read; read-ahead
   * windows are capped at half of it (read-ahead.ts fitToMemory). 16 MiB by measurement
   * (2026-11-29, harness model-load, large image, same run, 4 runs each, 32 -> 16 MiB): peak RSS
   * eStargz 155-163 -> 141-144 MB, zstd:chunked 164-189 -> 159-182 (100 Mbit/s: 158-170 -> 148-151),
   * optimised 158-161 -> 148-157; cold read unchanged (eStargz 117 -> 118 MB/s median,
   * zstd:chunked 94 -> 91; 100 Mbit/s 12 MB/s both). Earlier: none cut the cold model read from
   * 132-182 to 112-140 MB/s (eStargz) and from 117-144 to 45-68 (zstd:chunked: a chunk kept off
   * disk is decoded again for each 128 KiB read).
   */
  memoryBytes: 16 * MiB,
  /**
   * A memory LRU entry unused this long leaves once its chunk is on disk: chunks prefetched or read
   * ahead for a reader that never came otherwise stay until evicted, in an idle store too (16 MB
   * of 4 MiB chunks with the large image's 9 layers mounted, nothing read; bench/README session 16).
   */
  memoryIdleMs: 30_000,
} as const;

/** `[deadlines]` in seconds; the FUSE limit stays above the two the store answers itself. */
export const DEADLINE_DEFAULTS_SEC = {
  lookup: 20,
  read: 25,
  fuse: 30,
  /** How long "not lazily servable" (ENOENT) is remembered. */
  negativeTtl: 60,
} as const;

/** Go `resolve_result_entry_ttl_sec`: an unused resolved layer stays open this long. */
export const IDLE_LAYER_TTL_SEC = 120;

/** `[background]`: quiet period after on-demand reads (ms) and the store-wide byte rate (0 = unlimited). */
export const BACKGROUND_DEFAULTS = {
  quietMs: 2000,
  bandwidthBytesPerSec: 32 * MiB,
} as const;

/**
 * `max_toc_entries`: layers whose TOC has more entries are refused early. Same value as
 * format/open-layer.ts DEFAULT_MAX_ENTRIES (kept here so loading the config does not load format/).
 */
export const MAX_TOC_ENTRIES = 1_000_000;
