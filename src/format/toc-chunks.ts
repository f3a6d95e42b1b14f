/**
 * A regular file's TOC chunk entries turned into Chunk objects with checked compressed spans
 * (spec §1.8): the chunk half of the tree normalisation in toc-tree.ts.
 */
import { StoreError } from '../util/errors.js';
import { IndexChunk } from './index-chunk.js';
import { IndexNode, NO_CHUNKS } from './index-node.js';
import type { NumberList } from '../util/number-list.js';
import type { Chunk } from './model.js';
import type { TocEntry } from './toc.js';
import type { TreeLimits } from './toc-tree.js';

/** E_BAD_TOC naming the TOC entry at fault. */
export function bad(
  e: Pick<TocEntry, 'index' | 'name'> | undefined,
  message: string,
  extra: Record<string, string | number> = {},
): StoreError {
  const where = e === undefined ? '' : `TOC entry ${e.index} (${JSON.stringify(e.name).slice(0, 120)}): `;
  return new StoreError('E_BAD_TOC', where + message, { ...(e ? { entry: e.index } : {}), ...extra });
}

/** A regular file whose chunk entries are still arriving. */
export interface OpenFile {
  node: IndexNode;
  reg: TocEntry;
  /** The reg entry followed by its chunk entries, in TOC order. */
  entries: TocEntry[];
}

/**
 * Chunks whose compressed span ends at the next data member (stargz style) get compressedEnd
 * OPEN_END until TreeBuilder.finish() knows every member start; for its messages it keeps the
 * TOC index of each, in TOC order (holding the TocEntry would keep the whole TOC alive).
 */
export const OPEN_END = -1;

/** Smallest value in sorted `starts` strictly greater than `offset` (duplicates allowed). */
export function nextStart(starts: Float64Array, offset: number): number | undefined {
  let lo = 0;
  let hi = starts.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (starts[mid]! <= offset) lo = mid + 1;
    else hi = mid;
  }
  return starts[lo];
}

export function checkSpan(
  e: Pick<TocEntry, 'index' | 'name'>,
  compressedOffset: number,
  end: number | undefined,
  limits: TreeLimits,
): void {
  if (
    end === undefined ||
    compressedOffset >= limits.dataEnd ||
    end > limits.dataEnd ||
    end <= compressedOffset
  ) {
    throw bad(
      e,
      `compressed span [${compressedOffset}, ${end}) is outside the data region [0, ${limits.dataEnd})`,
      { offset: compressedOffset },
    );
  }
}

/**
 * The chunks of one regular file. containers/storage-style spans (endOffset) are complete here;
 * stargz-style ones end at the next data member, known only once the whole TOC has been read:
 * their TOC indexes go to `openSpans` and TreeBuilder.finish() sets their ends.
 */
export function buildChunks(file: OpenFile, limits: TreeLimits, openSpans: NumberList): Chunk[] {
  const reg = file.reg;
  const size = reg.size;
  if (size === 0) {
    if (file.entries.length > 1) throw bad(reg, 'empty file with chunk entries');
    return NO_CHUNKS; // one shared array: TOCs can hold hundreds of thousands of empty files
  }
  // containers/storage style: endOffset on the reg entry bounds the file's frames
  const cstorage = reg.endOffset !== undefined;
  // nextOffsets[k]: offset of the first later chunk that has one (linear, whatever the TOC says)
  let nextOffsets: Array<number | undefined> | undefined;
  if (cstorage) {
    nextOffsets = new Array<number | undefined>(file.entries.length);
    let next: number | undefined;
    for (let k = file.entries.length - 1; k >= 0; k--) {
      nextOffsets[k] = next;
      const o = file.entries[k]!.offset;
      if (o > 0) next = o;
    }
  }
  const chunks: IndexChunk[] = [];
  let expected = 0;
  for (let k = 0; k < file.entries.length; k++) {
    const e = file.entries[k]!;
    const fileOffset = k === 0 ? reg.chunkOffset : e.chunkOffset;
    if (fileOffset !== expected) {
      throw bad(e, `chunks do not tile the file: chunk at ${fileOffset}, expected ${expected}`, {
        offset: fileOffset,
      });
    }
    // chunkSize 0/absent = up to the end of the file (spec §9.3 item 4)
    const chunkSize = e.chunkSize > 0 ? e.chunkSize : size - fileOffset;
    if (chunkSize <= 0 || fileOffset + chunkSize > size) {
      throw bad(e, `chunk [${fileOffset}, ${fileOffset + chunkSize}) exceeds file size ${size}`);
    }
    // chunkDigest, or the whole-file digest for a file that is a single chunk
    const digest = e.chunkDigest ?? (file.entries.length === 1 ? reg.digest : undefined);
    if (digest === undefined) throw bad(e, 'chunk has no digest');
    const zeros = e.chunkType === 'zeros';
    let compressedOffset: number;
    let compressedEnd: number;
    if (zeros) {
      // no data to fetch; keep the span empty at a sensible position
      // (a stargz-style previous chunk has no end yet: its start will do)
      const prev = chunks[k - 1];
      compressedOffset =
        e.offset > 0
          ? e.offset
          : prev === undefined
            ? reg.offset
            : cstorage
              ? prev.compressedEnd
              : prev.compressedOffset;
      compressedEnd = compressedOffset;
      if (compressedOffset > limits.dataEnd) throw bad(e, 'chunk offset beyond the data region');
    } else {
      compressedOffset = e.offset;
      if (cstorage) {
        // each chunk is its own frame(s): it ends where the next chunk (with an offset) starts,
        // the last one at the file's endOffset (on the reg entry); a chunk entry's own
        // endOffset wins if present. Offsets must ascend, or the span is empty and refused.
        const end = k > 0 && e.endOffset !== undefined ? e.endOffset : (nextOffsets![k] ?? reg.endOffset);
        checkSpan(e, compressedOffset, end, limits);
        compressedEnd = end!;
      } else {
        if (compressedOffset >= limits.dataEnd) checkSpan(e, compressedOffset, undefined, limits);
        compressedEnd = OPEN_END;
      }
    }
    const chunk = IndexChunk.create(
      fileOffset,
      chunkSize,
      compressedOffset,
      compressedEnd,
      zeros ? 0 : e.innerOffset,
      digest,
      zeros,
    );
    if (!zeros && !cstorage) openSpans.push(e.index);
    chunks.push(chunk);
    expected = fileOffset + chunkSize;
  }
  if (expected !== size) throw bad(reg, `chunks cover ${expected} of ${size} bytes`);
  // exact-size storage: a pushed-to array keeps room for 17 elements (~150 B per file);
  // a file of one chunk keeps the chunk alone (IndexNode.setContent)
  return chunks.length === 1 ? chunks : chunks.slice();
}
