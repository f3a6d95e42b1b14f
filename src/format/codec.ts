import { constants as bufferConstants } from 'node:buffer';
import { createHash, webcrypto } from 'node:crypto';
import { asStoreError, DigestMismatchError, StoreError, type ErrorContext } from '../util/errors.js';
import { transferableCopy } from './transfer.js';
import { CodecPool, type ChunkReply, type CodecReply } from './codec-pool.js';
import type { Chunk, Compression } from './model.js';

/**
 * Chunk decoding and hashing, always off the main thread (the main thread serves FUSE requests):
 * a lazily started pool of worker threads (default 2) decompresses, skips `innerOffset` and
 * checks sha256. Input spans are copied into a transferable buffer (the caller keeps its own);
 * results come back by transfer, without a copy.
 */

export const DEFAULT_CODEC_WORKERS = 2;
// Node >= 22 lets a Buffer reach 2^53-1 bytes; materialising more than 4 GiB of zeros is never sane.
const MAX_LENGTH = Math.min(bufferConstants.MAX_LENGTH, 2 ** 32);

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

/** `size:digest` of zeros chunks whose digest was checked, and checks in progress. */
const zerosVerified = new Set<string>();
/** Zeros chunks found lying, with their real digest: a bad hole is not re-hashed on every read. */
const zerosBad = new Map<string, string>();
const zerosChecks = new Map<string, Promise<void>>();
/** Bound on remembered zeros checks (one per distinct hole length; cleared when full). */
const MAX_ZEROS_MEMO = 10_000;
/** Up to this size a zeros digest is computed inline: cheaper than a worker round trip. */
const INLINE_ZEROS = 64 * 1024;

const zerosKey = (chunk: Chunk): string => `${chunk.size}:${chunk.digest}`;

/** True once `chunk` (a zeros chunk) is known to hash to its digest: no I/O or CPU needed. */
export function isZerosVerified(chunk: Chunk): boolean {
  return zerosVerified.has(zerosKey(chunk));
}

/**
 * Check once that a `zeros` chunk's digest really is the sha256 of `size` zero bytes (the flag is
 * TOC data like any other). Never allocates `size` bytes: a fixed zero buffer is hashed
 * repeatedly on a codec worker, in steps. Results are remembered per (size, digest) and
 * concurrent checks of the same chunk share one computation. Throws DigestMismatchError.
 */
export async function verifyZeros(chunk: Chunk, context: ErrorContext = {}): Promise<void> {
  checkGeometry(chunk, context);
  const key = zerosKey(chunk);
  if (zerosVerified.has(key)) return;
  const knownBad = zerosBad.get(key);
  if (knownBad !== undefined) {
    throw new DigestMismatchError('chunk', chunk.digest, knownBad, { ...context, offset: chunk.fileOffset });
  }
  let check = zerosChecks.get(key);
  if (check === undefined) {
    check = (async () => {
      let reply: CodecReply;
      if (chunk.size <= INLINE_ZEROS) {
        const actual = 'sha256:' + createHash('sha256').update(Buffer.alloc(chunk.size)).digest('hex');
        reply =
          actual === chunk.digest
            ? { id: 0, ok: true }
            : { id: 0, ok: false, kind: 'mismatch', message: 'digest mismatch', actual };
      } else {
        reply = await getPool().run({ op: 'zeros', size: chunk.size, digest: chunk.digest });
      }
      if (!reply.ok) {
        if (reply.kind === 'mismatch' && reply.actual !== undefined) {
          if (zerosBad.size >= MAX_ZEROS_MEMO) zerosBad.clear();
          zerosBad.set(key, reply.actual);
        }
        throw failure(reply, chunk, context);
      }
      if (zerosVerified.size >= MAX_ZEROS_MEMO) zerosVerified.clear();
      zerosVerified.add(key);
    })();
    zerosChecks.set(key, check);
    const done = (): void => {
      zerosChecks.delete(key);
    };
    check.then(done, done);
  }
  try {
    await check;
  } catch (err) {
    // The shared check carries the first caller's context; report this caller's own.
    if (err instanceof DigestMismatchError) {
      throw new DigestMismatchError('chunk', chunk.digest, String(err.context.actual ?? ''), {
        ...context,
        offset: chunk.fileOffset,
      });
    }
    throw err;
  }
}

function checkGeometry(chunk: Chunk, context: ErrorContext): void {
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
}

function failure(
  reply: Extract<CodecReply, { ok: false }> | Extract<ChunkReply, { ok: false }>,
  chunk: Chunk,
  context: ErrorContext,
): StoreError {
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
  checkGeometry(chunk, context);
  if (chunk.zeros) {
    // Callers that serve reads use verifyZeros() and never materialise the chunk; this keeps
    // the whole-chunk contract for the others, refusing sizes no Buffer can hold.
    if (chunk.size > MAX_LENGTH) {
      throw new StoreError('E_TOO_LARGE', `zeros chunk of ${chunk.size} bytes cannot be materialised`, {
        ...context,
        offset: chunk.fileOffset,
        size: chunk.size,
      });
    }
    await verifyZeros(chunk, context);
    return Buffer.alloc(chunk.size);
  }
  const src = [await transferableCopy(span)];
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

/**
 * Decode several chunks that share one compressed span (eStargz small files packed into one gzip
 * member via innerOffset): the span is decompressed once, each chunk verified on its own. Returns
 * per chunk, in order, its verified bytes or the StoreError it failed with (one bad chunk does not
 * fail the others). `zeros` chunks are handled like decodeChunk does.
 */
export async function decodeChunks(
  compression: Compression,
  span: Buffer,
  chunks: readonly Chunk[],
  context: ErrorContext = {},
): Promise<Array<Buffer | StoreError>> {
  const settle = (p: Promise<Buffer>): Promise<Buffer | StoreError> =>
    p.catch((err: unknown) => asStoreError(err, 'E_DECOMPRESS', context));
  const data = chunks.filter((c) => !c.zeros);
  if (data.length <= 1)
    return await Promise.all(chunks.map((c) => settle(decodeChunk(compression, span, c, context))));
  const out = new Array<Buffer | StoreError>(chunks.length);
  const batch: number[] = [];
  await Promise.all(
    chunks.map(async (c, i) => {
      if (c.zeros) out[i] = await settle(decodeChunk(compression, span, c, context));
      else {
        try {
          checkGeometry(c, context);
          batch.push(i);
        } catch (err) {
          out[i] = asStoreError(err, 'E_INVALID_ARGUMENT', context);
        }
      }
    }),
  );
  if (batch.length === 0) return out;
  const src = [await transferableCopy(span)];
  const reply = await getPool().run(
    {
      op: 'decodeMany',
      codec: compression === 'gzip' ? 'gzip' : 'zstd',
      src,
      chunks: batch.map((i) => ({
        innerOffset: chunks[i]!.innerOffset,
        size: chunks[i]!.size,
        digest: chunks[i]!.digest,
      })),
    },
    src,
  );
  batch.forEach((i, k) => {
    const chunk = chunks[i]!;
    if (!reply.ok) {
      out[i] = failure(reply, chunk, context);
      return;
    }
    const r = reply.results?.[k];
    if (r === undefined) out[i] = new StoreError('E_IO', 'codec worker returned no result', { ...context });
    else if (!r.ok) out[i] = failure(r, chunk, context);
    else out[i] = Buffer.from(r.data, r.byteOffset, r.length);
  });
  return out;
}

/** Up to this size hashing inline costs less than any hand-off (~75 us at 1.7 GB/s). */
const INLINE_HASH = 128 * 1024;
/** Up to this size WebCrypto (libuv thread pool) is used: its synchronous input copy stays < 1 ms. */
const WEBCRYPTO_HASH = 4 * 1024 * 1024;

/**
 * `sha256:<hex>` of `buf` without blocking the event loop: inline when tiny, on the libuv thread
 * pool (WebCrypto) when medium, on a codec worker (input copied in yielding steps) when large.
 * The one hashing helper of the store: the TOC, cache reads and CLI checks all use it. The
 * caller's buffer is never detached or modified.
 */
export async function sha256Async(buf: Uint8Array): Promise<string> {
  if (buf.length <= INLINE_HASH) return 'sha256:' + createHash('sha256').update(buf).digest('hex');
  if (buf.length <= WEBCRYPTO_HASH) {
    return 'sha256:' + Buffer.from(await webcrypto.subtle.digest('SHA-256', buf)).toString('hex');
  }
  const src = [await transferableCopy(buf)];
  const reply = await getPool().run({ op: 'sha256', src }, src);
  if (!reply.ok || reply.digest === undefined) {
    throw new StoreError('E_IO', `sha256 failed: ${reply.ok ? 'no digest' : reply.message}`);
  }
  return reply.digest;
}
