import { digestKey } from '../format/index-chunk.js';
import type { Chunk, LayerIndex, TreeNode } from '../format/model.js';
import { Slicer } from '../format/toc.js';

export interface LayerPlan {
  /** Distinct (by digest) chunks that need data from the blob, sorted by compressed offset. */
  chunks: Chunk[];
  /** Sum of the uncompressed sizes of `chunks`. */
  totalChunkBytes: number;
}

/**
 * Chunks of every regular file, deduplicated by digest (`zeros` chunks need no data), giving the
 * event loop a turn every few ms (checked every `batch` nodes): a TOC can have millions of files
 * and this runs on the thread that serves FUSE.
 */
export async function planLayerAsync(index: LayerIndex, batch = 1000): Promise<LayerPlan> {
  const byDigest = new Map<string, Chunk>();
  const nodes = index.nodes;
  const slicer = new Slicer();
  for (let i = 0; i < nodes.length; i++) {
    collect(nodes[i], byDigest);
    if (i % batch === batch - 1) await slicer.tick();
  }
  return finish(byDigest);
}

function collect(node: TreeNode | undefined, byDigest: Map<string, Chunk>): void {
  if (node === undefined || node.type !== 'reg') return;
  for (const c of node.chunks) {
    if (c.zeros) continue;
    const key = digestKey(c);
    if (!byDigest.has(key)) byDigest.set(key, c);
  }
}

function finish(byDigest: Map<string, Chunk>): LayerPlan {
  // TOC order is blob order for every known writer, so this sort is close to linear.
  const chunks = [...byDigest.values()].sort((a, b) => a.compressedOffset - b.compressedOffset);
  let total = 0;
  for (const c of chunks) total += c.size;
  return { chunks, totalChunkBytes: total };
}

/** Smallest background unit: smaller ones cost a request each for almost nothing. */
const MIN_UNIT_BYTES = 4096;

export interface FetchUnit {
  /** Compressed range [offset, end). */
  offset: number;
  end: number;
  /** Chunks whose compressed span lies inside the unit. */
  chunks: Chunk[];
}

/**
 * Cut [0, blobSize) into consecutive units of about `unitBytes` for the background pass. A cut is
 * only made where no chunk's compressed span crosses it, so every chunk decodes from one unit;
 * the units together cover the whole blob, which the DiffID stream needs.
 */
export function planUnits(plan: LayerPlan, blobSize: number, unitBytes: number): FetchUnit[] {
  // a zero, negative or NaN unit size would never advance through the tail
  if (!(unitBytes >= 1)) unitBytes = MIN_UNIT_BYTES;
  unitBytes = Math.max(MIN_UNIT_BYTES, Math.floor(unitBytes));
  const units: FetchUnit[] = [];
  let start = 0;
  let maxEnd = 0;
  let current: Chunk[] = [];
  for (const c of plan.chunks) {
    const cutOk = c.compressedOffset >= maxEnd;
    if (cutOk && c.compressedOffset - start >= unitBytes && c.compressedOffset > start) {
      units.push({ offset: start, end: c.compressedOffset, chunks: current });
      start = c.compressedOffset;
      current = [];
    }
    current.push(c);
    maxEnd = Math.max(maxEnd, c.compressedEnd);
  }
  // The tail (last data, TOC, footer) in unit-sized pieces; no chunk spans past maxEnd.
  let end = Math.max(maxEnd, start);
  if (end - start < unitBytes) end = Math.min(blobSize, Math.max(end, start + unitBytes));
  units.push({ offset: start, end: Math.min(end, blobSize), chunks: current });
  for (let off = units[units.length - 1]!.end; off < blobSize; off += unitBytes) {
    units.push({ offset: off, end: Math.min(blobSize, off + unitBytes), chunks: [] });
  }
  return units.filter((u) => u.end > u.offset || u.chunks.length > 0);
}
