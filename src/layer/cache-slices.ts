import type { ChunkCache } from '../cache/chunk-cache.js';
import { isSha256Digest } from '../cache/paths.js';
import { isZerosVerified } from '../format/codec.js';
import type { Chunk } from '../format/model.js';

/**
 * File bytes [offset, end) copied straight out of the chunk cache: every chunk is in memory or in
 * a chunk file this process verified (ChunkCache.readSlice), so only the requested slices are read
 * (a 128 KiB read of a 4 MiB chunk reads 128 KiB, not the chunk). Undefined when any chunk needs
 * a load (absent, changed on disk, not yet verified since start, a gap in the chunk list): the
 * caller then goes through the chunk loader, which also reports TOCs that disagree.
 */
export async function readFromCache(
  cache: ChunkCache,
  chunks: readonly Chunk[],
  offset: number,
  end: number,
): Promise<Buffer | undefined> {
  for (const c of chunks) {
    if (c.zeros ? !isZerosVerified(c) : !isSha256Digest(c.digest) || !cache.hasVerified(c.digest)) {
      return undefined;
    }
  }
  const out = Buffer.allocUnsafe(end - offset);
  const reads: Array<Promise<boolean>> = [];
  let pos = offset;
  for (const c of chunks) {
    if (c.fileOffset > pos) return undefined;
    const from = pos - c.fileOffset;
    const to = Math.min(end, c.fileOffset + c.size) - c.fileOffset;
    if (c.zeros) out.fill(0, pos - offset, pos - offset + (to - from));
    else reads.push(cache.readSlice(c.digest, c.size, { from, to }, out, pos - offset));
    pos += to - from;
  }
  if (pos !== end) return undefined;
  const done = await Promise.all(reads);
  return done.every(Boolean) ? out : undefined;
}
