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

/** A span asked for on demand; `chunk` and `file` (its file's chunk list) when known. */
export interface AskedSpan {
  offset: number;
  end: number;
  chunk?: Chunk;
  file?: readonly Chunk[];
}

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
 * File bytes per block: an asked chunk brings the other chunks of its file whose file offsets lie
 * in the same aligned block of this size. It is eStargz's default chunk size, so a finely chunked
 * file (zstd:chunked cuts files into ~50 KiB chunks) costs the requests an eStargz layer of the
 * same files costs: a mapped library read through page faults is one request, not one per fault.
 */
export const FILE_BLOCK_BYTES = 4 * 1024 * 1024;

/**
 * Read-around for one layer's on-demand fetches: the compressed spans of whole chunks that ride
 * along in the same request. Two kinds: the asked chunk's file block (FILE_BLOCK_BYTES, both
 * directions), and the chunks that follow each asked span in the blob up to a window past it,
 * stopping at a chunk already cached, in flight or held locally. They cost no extra round trip
 * now (several ranges go in one request), and the files a start-up reads usually lie together.
 * They are not decoded: their bytes go to the local compressed store with every other fetched
 * byte, and a later read of them is served from there (decoded then, only if read). A miss just
 * past the previous window widens the next one (up to MAX_READ_AROUND_BYTES); any other miss
 * starts again from the base window.
 */
export class ReadAround {
  /** End of the last on-demand fetch with its read-around, and the window it used. */
  private lastEnd = -1;
  private window = 0;

  constructor(private readonly o: ReadAroundOptions) {}

  /**
   * Spans [offset, end) to fetch along with the asked ones (sorted, disjoint from them). An asked
   * span may name its chunk and the chunk list of its file: then its file block comes along.
   */
  extra(asked: readonly AskedSpan[]): Array<{ offset: number; end: number }> {
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
    const take = (c: Chunk): boolean => {
      if (!hasData(c)) return false;
      if (askedKeys.has(`${c.compressedOffset}:${c.compressedEnd}`) || !this.o.isFresh(c)) return false;
      out.push({ offset: c.compressedOffset, end: c.compressedEnd });
      return true;
    };
    let covered = 0;
    // each (file, block) once per call: a read of N chunks of one block would scan it N times
    const blocks = new Map<readonly Chunk[], Set<number>>();
    for (const s of sorted) {
      if (s.file !== undefined && s.chunk !== undefined) {
        const block = Math.floor(s.chunk.fileOffset / FILE_BLOCK_BYTES);
        let seen = blocks.get(s.file);
        if (seen === undefined) blocks.set(s.file, (seen = new Set()));
        if (!seen.has(block)) {
          seen.add(block);
          fileBlock(s.file, s.chunk, take);
        }
      }
      const limit = Math.min(this.o.blobSize, s.end + this.window);
      let end = Math.max(s.end, covered);
      for (let i = firstAtOrAfter(all, s.end); i < all.length; i++) {
        const c = all[i]!;
        // a hole (other data, another file's metadata) larger than a gap ends the run
        if (c.compressedOffset > end + this.o.maxGap || c.compressedEnd > limit) break;
        if (c.compressedEnd <= end || askedKeys.has(`${c.compressedOffset}:${c.compressedEnd}`)) {
          end = Math.max(end, c.compressedEnd);
          continue;
        }
        if (!hasData(c)) continue;
        if (!take(c)) break;
        end = c.compressedEnd;
      }
      covered = Math.max(covered, end);
    }
    const merged = mergeSpans(out);
    this.lastEnd = Math.max(covered, merged[merged.length - 1]?.end ?? 0);
    return merged;
  }
}

/** A chunk with compressed data to fetch (not zeros, a usable digest, a non-empty span). */
function hasData(c: Chunk): boolean {
  return !c.zeros && isSha256Digest(c.digest) && c.compressedEnd > c.compressedOffset;
}

/** Offer `take` the other chunks of `chunk`'s file block: same file, file offsets in the same block. */
function fileBlock(file: readonly Chunk[], chunk: Chunk, take: (c: Chunk) => boolean): void {
  const blockStart = chunk.fileOffset - (chunk.fileOffset % FILE_BLOCK_BYTES);
  const blockEnd = blockStart + FILE_BLOCK_BYTES;
  // a file's chunks are sorted by file offset
  for (
    let i = lowerBound(file, (c) => c.fileOffset, blockStart);
    i < file.length && file[i]!.fileOffset < blockEnd;
    i++
  ) {
    if (file[i] !== chunk) take(file[i]!);
  }
}

/** Sorted union of spans (equal or overlapping spans taken twice become one). */
function mergeSpans(spans: Array<{ offset: number; end: number }>): Array<{ offset: number; end: number }> {
  spans.sort((a, b) => a.offset - b.offset);
  const out: Array<{ offset: number; end: number }> = [];
  for (const s of spans) {
    const last = out[out.length - 1];
    if (last !== undefined && s.offset <= last.end) last.end = Math.max(last.end, s.end);
    else out.push({ ...s });
  }
  return out;
}

/** Index of the first chunk whose compressed span starts at or after `offset` (binary search). */
export function firstAtOrAfter(sorted: readonly Chunk[], offset: number): number {
  return lowerBound(sorted, (c) => c.compressedOffset, offset);
}

/** Index of the first chunk whose `key` is >= `value`, in chunks sorted by `key`. */
function lowerBound(sorted: readonly Chunk[], key: (c: Chunk) => number, value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (key(sorted[mid]!) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
