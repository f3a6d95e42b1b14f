import { isSha256Digest } from '../cache/paths.js';
import type { Chunk } from '../format/model.js';

/** Default base window of an on-demand fetch's read-around. */
export const READ_AROUND_BYTES = 128 * 1024;
/**
 * Misses that land just past the previous read-around double the window up to this: a start-up
 * walking through a directory of modules in blob order then costs a few requests, not one per
 * 128 KiB (1 MiB is about 85 ms at 100 Mbit/s, under three round trips of 30 ms).
 */
export const MAX_READ_AROUND_BYTES = 1024 * 1024;

export interface ReadAroundOptions {
  blobSize: number;
  /** Holes larger than this between chunks end a run (on-demand coalescing gap). */
  maxGap: number;
  /** Base window (0: no read-around). */
  baseBytes: number;
  /** The layer's data chunks sorted by compressed offset, once known. */
  neighbours: () => readonly Chunk[] | undefined;
  /** Neither cached, nor in flight, nor held locally: worth fetching now. */
  isFresh(c: Chunk): boolean;
}

/**
 * Read-around for one layer's on-demand fetches: the compressed spans of the whole chunks that
 * follow each asked span in the blob ride along in the same request, up to a window past it,
 * stopping at a chunk already cached, in flight or held locally. They cost no extra round trip
 * now, and the files a start-up reads usually lie together. They are not decoded: their bytes go
 * to the local compressed store with every other fetched byte, and a later read of them is served
 * from there (decoded then, only if read). A miss just past the previous window widens the next
 * one (up to MAX_READ_AROUND_BYTES); any other miss starts again from the base window.
 */
export class ReadAround {
  /** End of the last on-demand fetch with its read-around, and the window it used. */
  private lastEnd = -1;
  private window = 0;

  constructor(private readonly o: ReadAroundOptions) {}

  /** Spans [offset, end) to fetch along with the asked ones (sorted, disjoint from them). */
  extra(asked: ReadonlyArray<{ offset: number; end: number }>): Array<{ offset: number; end: number }> {
    const base = this.o.baseBytes;
    const all = base > 0 && asked.length > 0 ? this.o.neighbours() : undefined;
    if (all === undefined || all.length === 0) return [];
    const sorted = [...asked].sort((a, b) => a.offset - b.offset);
    const askedKeys = new Set(sorted.map((s) => `${s.offset}:${s.end}`));
    const first = sorted[0]!.offset;
    const walking = this.lastEnd >= 0 && first >= this.lastEnd - base && first <= this.lastEnd + base;
    this.window = walking
      ? Math.min(Math.max(base, MAX_READ_AROUND_BYTES), Math.max(base, this.window * 2))
      : base;
    const out: Array<{ offset: number; end: number }> = [];
    let covered = 0;
    for (const s of sorted) {
      const limit = Math.min(this.o.blobSize, s.end + this.window);
      // the rest of the asked chunk's own file rides along up to the largest window at once: a
      // finely chunked file (zstd:chunked, ~50 KiB chunks) read through page faults (a mapped
      // library) otherwise costs a request per fault, where one eStargz chunk holds the file
      const fileLimit = Math.min(this.o.blobSize, s.end + Math.max(this.window, MAX_READ_AROUND_BYTES));
      const start = firstAtOrAfter(all, s.end);
      let prev = start > 0 && all[start - 1]!.compressedEnd === s.end ? all[start - 1] : undefined;
      let end = Math.max(s.end, covered);
      for (let i = start; i < all.length; i++) {
        const c = all[i]!;
        const sameFile =
          prev !== undefined && c.fileOffset > 0 && c.fileOffset === prev.fileOffset + prev.size;
        prev = sameFile ? c : undefined;
        // a hole (other data, another file's metadata) larger than a gap ends the run
        if (c.compressedOffset > end + this.o.maxGap || c.compressedEnd > (sameFile ? fileLimit : limit))
          break;
        if (c.zeros || !isSha256Digest(c.digest) || c.compressedEnd <= c.compressedOffset) continue;
        if (c.compressedEnd <= end || askedKeys.has(`${c.compressedOffset}:${c.compressedEnd}`)) {
          end = Math.max(end, c.compressedEnd);
          continue;
        }
        if (!this.o.isFresh(c)) break;
        out.push({ offset: Math.max(c.compressedOffset, end), end: c.compressedEnd });
        end = c.compressedEnd;
      }
      covered = Math.max(covered, end);
    }
    this.lastEnd = covered;
    return out;
  }
}

/** Index of the first chunk whose compressed span starts at or after `offset` (binary search). */
export function firstAtOrAfter(sorted: readonly Chunk[], offset: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid]!.compressedOffset < offset) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
