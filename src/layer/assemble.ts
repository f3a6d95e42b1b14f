import type { Chunk, TreeNode } from '../format/model.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { releaseNextTurn } from '../util/release-buffer.js';
import { ZEROS, type ChunkBytes } from './chunk-loader.js';

/**
 * Copy the requested slice out of the chunk buffers (no copy when one chunk covers it and `view`
 * allows a view of it: see ReadOptions.transient; a transient answer copied from several chunks
 * is released at the next turn of the event loop). `ZEROS` entries are zeros chunks: only the
 * requested part of them is ever allocated.
 */
export function assemble(
  node: TreeNode,
  chunks: readonly Chunk[],
  bufs: readonly ChunkBytes[],
  offset: number,
  end: number,
  context: ErrorContext,
  view: boolean,
): Buffer {
  const first = chunks[0];
  if (
    chunks.length === 1 &&
    first !== undefined &&
    first.fileOffset <= offset &&
    first.fileOffset + first.size >= end
  ) {
    const b = bufs[0];
    if (b === ZEROS) return Buffer.alloc(end - offset);
    const slice = b!.subarray(offset - first.fileOffset, end - first.fileOffset);
    return view ? slice : Buffer.from(slice);
  }
  const out = Buffer.allocUnsafe(end - offset);
  // a transient answer is copied within this turn: its memory goes at the next one, not at the
  // next full collection (a cold zstd:chunked model read assembles most 128 KiB FUSE reads from
  // three chunks: ~19 MB of them were waiting for a collection at a time, bench/README session 18)
  if (view) releaseNextTurn(out, { counted: false });
  let pos = offset;
  for (let i = 0; i < chunks.length; i++) {
    const c = chunks[i]!;
    if (c.fileOffset > pos) break;
    const from = pos - c.fileOffset;
    const to = Math.min(end, c.fileOffset + c.size) - c.fileOffset;
    const b = bufs[i];
    if (b === ZEROS) out.fill(0, pos - offset, pos - offset + (to - from));
    else b!.copy(out, pos - offset, from, to);
    pos += to - from;
  }
  if (pos !== end || first === undefined || first.fileOffset > offset) {
    throw new StoreError('E_BAD_TOC', 'file chunks do not cover the requested range', {
      ...context,
      path: node.path,
      offset,
      end,
    });
  }
  return out;
}

/**
 * True when a chunk's buffer is shorter than the chunk: released by the cache (util/release-buffer.ts
 * leaves it empty) while a read held it. Borrowing (ChunkCache.borrow) prevents that; should it
 * happen anyway, the read fails instead of assembling bytes that are not there.
 */
export function someReleased(chunks: readonly Chunk[], bufs: readonly ChunkBytes[]): boolean {
  for (let i = 0; i < chunks.length; i++) {
    const b = bufs[i];
    if (b !== ZEROS && b !== undefined && b.length !== chunks[i]!.size) return true;
  }
  return false;
}
