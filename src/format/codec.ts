import { DigestMismatchError, StoreError, type ErrorContext } from '../util/errors.js';
import { CodecPool, type CodecReply } from './codec-pool.js';
import type { Chunk, Compression } from './model.js';

/**
 * Chunk decoding and hashing, always off the main thread (the main thread serves FUSE requests):
 * a lazily started pool of worker threads (default 2) decompresses, skips `innerOffset` and
 * checks sha256. Input spans are copied into a transferable buffer (the caller keeps its own);
 * results come back by transfer, without a copy.
 */

export const DEFAULT_CODEC_WORKERS = 2;

let pool: CodecPool | undefined;
let configuredSize = DEFAULT_CODEC_WORKERS;

function getPool(): CodecPool {
  pool ??= new CodecPool(configuredSize);
  return pool;
}

/** Set the number of codec worker threads (takes effect immediately; workers start lazily). */
export function configureCodec(opts: { workers?: number }): void {
  if (opts.workers === undefined) return;
  if (pool) pool.resize(opts.workers);
  else {
    new CodecPool(opts.workers); // validates; spawns nothing
    configuredSize = opts.workers;
  }
}

export function codecPoolSize(): number {
  return pool ? pool.poolSize : configuredSize;
}

/** Stop the worker threads (pending work fails with E_ABORTED); the next call starts a new pool. */
export async function terminateCodec(): Promise<void> {
  const p = pool;
  if (p) configuredSize = p.poolSize;
  pool = undefined;
  if (p) await p.terminate();
}

/** Copy granule: copying a large span in one go would stall the event loop for tens of ms. */
const SLICE = 1 << 20;

/**
 * Copy `buf` into transferable slices, yielding to the event loop between slices so a big span
 * never blocks other requests for more than one slice copy (~1 MiB memcpy).
 */
async function transferable(buf: Uint8Array): Promise<ArrayBuffer[]> {
  const out: ArrayBuffer[] = [];
  for (let off = 0; off < buf.length || out.length === 0; off += SLICE) {
    if (off > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const part = buf.subarray(off, Math.min(buf.length, off + SLICE));
    const ab = new ArrayBuffer(part.length);
    new Uint8Array(ab).set(part);
    out.push(ab);
  }
  return out;
}

/** sha256 of the all-zero buffer per length, so repeated zeros chunks are not re-hashed. */
const zeroDigests = new Map<number, string>();

function failure(reply: Extract<CodecReply, { ok: false }>, chunk: Chunk, context: ErrorContext): StoreError {
  const ctx = { ...context, offset: chunk.fileOffset, compressedOffset: chunk.compressedOffset };
  if (reply.kind === 'mismatch')
    return new DigestMismatchError('chunk', chunk.digest, reply.actual ?? '', ctx);
  if (reply.kind === 'truncated') {
    return new StoreError(
      'E_TRUNCATED',
      `decompressed chunk shorter than the TOC says: ${reply.message}`,
      ctx,
    );
  }
  return new StoreError('E_DECOMPRESS', `cannot decompress chunk: ${reply.message}`, ctx);
}

/**
 * Decode one chunk: decompress the compressed span starting at `chunk.compressedOffset`, skip
 * `innerOffset`, take `size` bytes and check sha256 against `chunk.digest`. Throws
 * DigestMismatchError / StoreError('E_DECOMPRESS' | 'E_TRUNCATED'); never returns unverified bytes.
 */
export async function decodeChunk(
  compression: Compression,
  span: Buffer,
  chunk: Chunk,
  context: ErrorContext = {},
): Promise<Buffer> {
  if (
    !Number.isSafeInteger(chunk.size) ||
    chunk.size < 0 ||
    !Number.isSafeInteger(chunk.innerOffset) ||
    chunk.innerOffset < 0
  ) {
    throw new StoreError('E_INVALID_ARGUMENT', 'invalid chunk geometry', {
      ...context,
      offset: chunk.fileOffset,
    });
  }
  if (chunk.zeros) {
    if (zeroDigests.get(chunk.size) !== chunk.digest) {
      const reply = await getPool().run({ op: 'zeros', size: chunk.size, digest: chunk.digest });
      if (!reply.ok) throw failure(reply, chunk, context);
      zeroDigests.set(chunk.size, chunk.digest);
    }
    return Buffer.alloc(chunk.size);
  }
  const src = await transferable(span);
  const reply = await getPool().run(
    {
      op: 'decode',
      codec: compression === 'gzip' ? 'gzip' : 'zstd',
      src,
      innerOffset: chunk.innerOffset,
      size: chunk.size,
      digest: chunk.digest,
    },
    src,
  );
  if (!reply.ok) throw failure(reply, chunk, context);
  return Buffer.from(reply.data!, reply.byteOffset ?? 0, reply.length ?? 0);
}

/** `sha256:<hex>` of `buf`, computed on a codec worker (the caller's buffer is not detached). */
export async function sha256Async(buf: Uint8Array): Promise<string> {
  const src = await transferable(buf);
  const reply = await getPool().run({ op: 'sha256', src }, src);
  if (!reply.ok || reply.digest === undefined) {
    throw new StoreError('E_IO', `sha256 failed: ${reply.ok ? 'no digest' : reply.message}`);
  }
  return reply.digest;
}
