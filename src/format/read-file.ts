/**
 * Read a byte range of a regular file straight from the blob: fetch each covering chunk's
 * compressed span, decode and verify it. No cache, no coalescing: the layer engine does that.
 */
import { asStoreError, StoreError } from '../util/errors.js';
import type { RangeReader } from '../util/range-reader.js';
import { decodeChunk, verifyZeros } from './codec.js';
import { chunksForRange, type Chunk, type LayerIndex, type TreeNode } from './model.js';

/** Fetch and verify one chunk; returns its `chunk.size` uncompressed bytes. */
export async function readChunk(
  reader: RangeReader,
  index: LayerIndex,
  node: TreeNode,
  chunk: Chunk,
  signal?: AbortSignal,
): Promise<Buffer> {
  let span: Buffer;
  if (chunk.zeros) {
    span = Buffer.alloc(0);
  } else {
    signal?.throwIfAborted();
    try {
      span = await reader.read(chunk.compressedOffset, chunk.compressedEnd - chunk.compressedOffset, signal);
    } catch (err) {
      throw asStoreError(err, signal?.aborted ? 'E_ABORTED' : 'E_IO', {
        path: node.path,
        offset: chunk.fileOffset,
        compressedOffset: chunk.compressedOffset,
      });
    }
  }
  return await decodeChunk(index.compression, span, chunk, { path: node.path });
}

/**
 * Bytes [offset, offset+length) of regular file `node`, clipped at its size. Every chunk is
 * verified against its digest; a bad chunk throws (DigestMismatchError / E_DECOMPRESS) and
 * no bytes are returned.
 */
export async function readFileRange(
  reader: RangeReader,
  index: LayerIndex,
  node: TreeNode,
  offset: number,
  length: number,
  signal?: AbortSignal,
): Promise<Buffer> {
  if (node.type !== 'reg') {
    throw new StoreError('E_INVALID_ARGUMENT', `${node.path || '/'} is not a regular file`, {
      path: node.path,
    });
  }
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
    throw new StoreError('E_INVALID_ARGUMENT', `invalid range offset=${offset} length=${length}`, {
      path: node.path,
    });
  }
  const end = Math.min(node.size, offset + length);
  if (offset >= end) return Buffer.alloc(0);
  const parts: Buffer[] = [];
  for (const chunk of chunksForRange(node, offset, end - offset)) {
    const from = Math.max(offset, chunk.fileOffset) - chunk.fileOffset;
    const to = Math.min(end, chunk.fileOffset + chunk.size) - chunk.fileOffset;
    if (chunk.zeros) {
      // a hole may be GiBs: verify its digest without materialising it, allocate only the slice
      await verifyZeros(chunk, { path: node.path });
      parts.push(Buffer.alloc(to - from));
      continue;
    }
    const data = await readChunk(reader, index, node, chunk, signal);
    parts.push(data.subarray(from, to));
  }
  const out = Buffer.concat(parts);
  if (out.length !== end - offset) {
    // cannot happen with a model from openLayer (chunks tile the file); never return short data
    throw new StoreError('E_BAD_TOC', 'chunk list does not cover the requested range', {
      path: node.path,
      offset,
    });
  }
  return out;
}
