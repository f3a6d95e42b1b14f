import { constants as bufferConstants } from 'node:buffer';
import { asStoreError, DigestMismatchError, StoreError, type ErrorContext } from '../util/errors.js';
import { gcPacer } from '../util/gc-pacer.js';
import { SingleFlight } from '../util/single-flight.js';
import { gunzipRange, zstdRange } from './codec-inflate.js';
import { sha256Async, zerosDigest } from './codec-hash.js';
import type { Chunk, Compression } from './model.js';

export { sha256Async } from './codec-hash.js';

/**
 * Chunk decoding and verification, without worker threads. gzip inflates on libuv's thread pool;
 * sha256 (codec-hash.ts) and zstd (zstd-napi, cheaper per byte than any hand-off, see
 * codec-inflate.ts) run on this thread in 1 MiB steps. Measured against the
 * worker pool this replaced (2 workers, every span copied to them), on the lab's 400 MB model
 * layer: 2.4x less CPU per MB for gzip, 2.3x for zstd, ~100 MiB lower peak RSS while decoding.
 */

// Node >= 22 lets a Buffer reach 2^53-1 bytes; materialising more than 4 GiB of zeros is never sane.
const MAX_LENGTH = Math.min(bufferConstants.MAX_LENGTH, 2 ** 32);

/** `size:digest` of zeros chunks whose digest was checked. */
const zerosVerified = new Set<string>();
/** Zeros chunks found lying, with their real digest: a bad hole is not re-hashed on every read. */
const zerosBad = new Map<string, string>();
/** Concurrent checks of the same hole share one computation. */
const zerosChecks = new SingleFlight<string, void>();
/** Bound on remembered zeros checks (one per distinct hole length; cleared when full). */
const MAX_ZEROS_MEMO = 10_000;

const zerosKey = (chunk: Chunk): string => `${chunk.size}:${chunk.digest}`;

/** True once `chunk` (a zeros chunk) is known to hash to its digest: no I/O or CPU needed. */
export function isZerosVerified(chunk: Chunk): boolean {
  return zerosVerified.has(zerosKey(chunk));
}

/**
 * Check once that a `zeros` chunk's digest really is the sha256 of `size` zero bytes (the flag is
 * TOC data like any other). Never allocates `size` bytes: a fixed zero buffer is hashed
 * repeatedly, in steps between which the event loop runs. Results are remembered per (size,
 * digest). Throws DigestMismatchError.
 */
export async function verifyZeros(chunk: Chunk, context: ErrorContext = {}): Promise<void> {
  checkGeometry(chunk, context);
  const key = zerosKey(chunk);
  if (zerosVerified.has(key)) return;
  const mismatch = (actual: string): DigestMismatchError =>
    new DigestMismatchError('chunk', chunk.digest, actual, { ...context, offset: chunk.fileOffset });
  const knownBad = zerosBad.get(key);
  if (knownBad !== undefined) throw mismatch(knownBad);
  await zerosChecks.run(key, async () => {
    const actual = await zerosDigest(chunk.size);
    if (actual !== chunk.digest) {
      if (zerosBad.size >= MAX_ZEROS_MEMO) zerosBad.clear();
      zerosBad.set(key, actual);
      return;
    }
    if (zerosVerified.size >= MAX_ZEROS_MEMO) zerosVerified.clear();
    zerosVerified.add(key);
  });
  // Each caller reports its own context (the shared check ran with the first caller's).
  const actual = zerosBad.get(key);
  if (actual !== undefined && !zerosVerified.has(key)) throw mismatch(actual);
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

const chunkContext = (chunk: Chunk, context: ErrorContext): ErrorContext => ({
  ...context,
  offset: chunk.fileOffset,
  compressedOffset: chunk.compressedOffset,
});

let decompressions = 0;

/** Compressed spans decompressed so far in this process (metrics; tests check sharing). */
export function decompressionCount(): number {
  return decompressions;
}

/** Bytes [skip, need) of the data `span` decompresses to (fewer if the data ends first). */
async function decompressRange(
  compression: Compression,
  span: Buffer,
  skip: number,
  need: number,
  ctx: ErrorContext,
): Promise<Buffer> {
  decompressions++;
  try {
    const plain =
      compression === 'gzip' ? await gunzipRange(span, skip, need) : await zstdRange(span, skip, need);
    // the compressed span and the decoded bytes: soon garbage V8 only sees as external memory
    gcPacer.note(span.length + plain.length);
    return plain;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    throw new StoreError('E_DECOMPRESS', `cannot decompress chunk: ${message}`, ctx, { cause: err });
  }
}

/**
 * The chunk's bytes cut from `plain` (the decompressed data from offset `base` on), verified
 * against its digest.
 */
async function verifiedSlice(
  plain: Buffer,
  base: number,
  chunk: Chunk,
  context: ErrorContext,
): Promise<Buffer> {
  const end = chunk.innerOffset + chunk.size;
  if (base + plain.length < end) {
    throw new StoreError(
      'E_TRUNCATED',
      `decompressed chunk shorter than the TOC says: decompressed ${base + plain.length} bytes, need ${end}`,
      chunkContext(chunk, context),
    );
  }
  const data = plain.subarray(chunk.innerOffset - base, end - base);
  const actual = await sha256Async(data);
  if (actual !== chunk.digest) {
    throw new DigestMismatchError('chunk', chunk.digest, actual, chunkContext(chunk, context));
  }
  return data;
}

/**
 * Decode one chunk: decompress the compressed span starting at `chunk.compressedOffset`, skip
 * `innerOffset`, take `size` bytes and check sha256 against `chunk.digest`. Throws
 * DigestMismatchError / StoreError('E_DECOMPRESS' | 'E_TRUNCATED'); never returns unverified bytes.
 * The result may be a view of a larger decompression buffer when innerOffset > 0.
 */
export async function decodeChunk(
  compression: Compression,
  span: Buffer,
  chunk: Chunk,
  context: ErrorContext = {},
): Promise<Buffer> {
  checkGeometry(chunk, context);
  const need = chunk.innerOffset + chunk.size;
  if (need > MAX_LENGTH) {
    // Callers that serve reads use verifyZeros() and never materialise a hole; no Buffer holds more.
    throw new StoreError('E_TOO_LARGE', `chunk of ${chunk.size} bytes cannot be materialised`, {
      ...context,
      offset: chunk.fileOffset,
      size: chunk.size,
    });
  }
  if (chunk.zeros) {
    await verifyZeros(chunk, context);
    return Buffer.alloc(chunk.size);
  }
  const plain = await decompressRange(
    compression,
    span,
    chunk.innerOffset,
    need,
    chunkContext(chunk, context),
  );
  return await verifiedSlice(plain, chunk.innerOffset, chunk, context);
}

/** An exact-size copy (not from Node's shared slab, which a cached small file would pin). */
function exactCopy(b: Buffer): Buffer {
  const own = Buffer.allocUnsafeSlow(b.length);
  b.copy(own);
  return own;
}

/**
 * Decode several chunks that share one compressed span (eStargz small files packed into one gzip
 * member via innerOffset): the span is decompressed once, each chunk verified on its own. Returns
 * per chunk, in order, its verified bytes or the StoreError it failed with (one bad chunk does not
 * fail the others). Chunks cut from the shared buffer are copied out of it, so a small file kept
 * in a cache never pins the whole member's output.
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
  if (data.length <= 1) {
    return await Promise.all(chunks.map((c) => settle(decodeChunk(compression, span, c, context))));
  }
  let need = 0;
  let skip = Number.POSITIVE_INFINITY;
  const valid: boolean[] = chunks.map((c) => {
    if (c.zeros) return false;
    try {
      checkGeometry(c, context);
      need = Math.max(need, c.innerOffset + c.size);
      skip = Math.min(skip, c.innerOffset);
      return true;
    } catch {
      return false;
    }
  });
  let plain: Buffer | StoreError;
  try {
    const ctx = { ...context, compressedOffset: data[0]!.compressedOffset };
    plain = await decompressRange(compression, span, Math.min(skip, need), need, ctx);
  } catch (err) {
    plain = asStoreError(err, 'E_DECOMPRESS', context);
  }
  const shared = plain;
  return await Promise.all(
    chunks.map((c, i) => {
      if (!valid[i]) return settle(decodeChunk(compression, span, c, context));
      if (shared instanceof StoreError) {
        return new StoreError(shared.code, shared.message, chunkContext(c, context), { cause: shared });
      }
      const base = Math.min(skip, need);
      return settle(verifiedSlice(shared, base, c, context).then(exactCopy));
    }),
  );
}
