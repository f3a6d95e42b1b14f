import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';
import { createRequire } from 'node:module';
import { DigestMismatchError, StoreError, type ErrorContext } from '../util/errors.js';
import type { Chunk, Compression } from './model.js';

// Placeholder implementation (decompress on the main thread); the worker-pool codec replaces it.
const require = createRequire(import.meta.url);
const zstd = require('zstd-napi') as { decompress(buf: Uint8Array): Buffer };
const gunzipAsync = promisify(gunzip);

/**
 * Decode one chunk: decompress the compressed span starting at `chunk.compressedOffset`, skip
 * `innerOffset`, take `size` bytes and check sha256 against `chunk.digest`. Throws
 * DigestMismatchError / StoreError('E_DECOMPRESS'); never returns unverified bytes.
 */
export async function decodeChunk(
  compression: Compression,
  span: Buffer,
  chunk: Chunk,
  context: ErrorContext = {},
): Promise<Buffer> {
  let data: Buffer;
  if (chunk.zeros) {
    data = Buffer.alloc(chunk.size);
  } else {
    let plain: Buffer;
    try {
      plain = compression === 'gzip' ? await gunzipAsync(span) : zstd.decompress(span);
    } catch (err) {
      throw new StoreError('E_DECOMPRESS', `cannot decompress chunk: ${(err as Error).message}`, {
        ...context,
        offset: chunk.fileOffset,
        compressedOffset: chunk.compressedOffset,
      });
    }
    if (plain.length < chunk.innerOffset + chunk.size) {
      throw new StoreError('E_TRUNCATED', 'decompressed chunk shorter than the TOC says', {
        ...context,
        offset: chunk.fileOffset,
      });
    }
    data = plain.subarray(chunk.innerOffset, chunk.innerOffset + chunk.size);
  }
  const actual = 'sha256:' + createHash('sha256').update(data).digest('hex');
  if (actual !== chunk.digest) {
    throw new DigestMismatchError('chunk', chunk.digest, actual, { ...context, offset: chunk.fileOffset });
  }
  return data;
}
