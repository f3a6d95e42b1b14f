import type { Interval } from '../cache/interval-set.js';
import { decodeChunks } from '../format/codec.js';
import type { Chunk, Compression } from '../format/model.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { StreamDigest } from './diffid.js';

/** The local compressed bytes of one blob (a LocalBlob of the blob store). */
export interface LocalBytes {
  readonly size: number;
  covered(offset: number, length: number): boolean;
  read(offset: number, length: number): Promise<Buffer>;
}

/** Where verified chunks go (the chunk cache). */
export interface VerifiedChunkSink {
  has(digest: string): boolean;
  put(digest: string, data: Buffer): Promise<void>;
}

export interface LocalVerifyOptions {
  blob: LocalBytes;
  compression: Compression;
  /** The image config's diff_id for this layer. */
  expectedDiffID: string;
  /** Distinct chunks to verify and cache (the layer plan's chunks); cached ones are skipped. */
  chunks: readonly Chunk[];
  cache: VerifiedChunkSink;
  signal?: AbortSignal;
  /** Compressed bytes read per step (extended so no chunk span is cut). Default 8 MiB. */
  windowBytes?: number;
  /** Runs each decode step, e.g. the scheduler's backgroundCpu (pauses for on-demand work). */
  runCpu?: <T>(fn: () => Promise<T>, signal: AbortSignal) => Promise<T>;
  /** Runs before each piece goes to the DiffID hasher, e.g. the scheduler's idle(). */
  beforePiece?: () => Promise<void>;
  context?: ErrorContext;
  onVerified?: (chunk: Chunk) => void;
  onChunkError?: (err: StoreError) => void;
}

export interface LocalVerifyResult {
  /** sha256 and length of the whole decompressed stream (absent when it did not decompress). */
  stream?: { digest: string; size: number };
  /** Why the stream has no digest (E_DECOMPRESS: the local bytes are not a valid stream). */
  streamError?: StoreError;
  /** The stream's digest equals expectedDiffID. */
  matched: boolean;
  chunkErrors: number;
  /**
   * Compressed spans of the chunks that failed: the local bytes there may be bad. Invalidate them
   * in the blob store and fetch them again (fresh) before the next attempt. When the stream
   * does not match but no chunk failed, the damage is outside the chunks (or the registry blob
   * itself is bad): drop the whole local copy and fetch it fresh once before declaring the layer bad.
   */
  badSpans: Interval[];
}

interface Group {
  start: number;
  end: number;
  chunks: Chunk[];
}

/**
 * The DiffID check and the chunk verification of a layer from its complete local compressed
 * copy, without network: the blob is read once, in order; each window goes to the DiffID stream
 * hasher (a worker thread decompressing gzip members / zstd frames and hashing the output) while
 * the chunks inside it are decoded, checked against their digests and put into the cache. The
 * full check always runs; only where the bytes come from changes, so a restart never skips it.
 */
export async function verifyFromLocal(opts: LocalVerifyOptions): Promise<LocalVerifyResult> {
  const { blob, signal } = opts;
  const context = opts.context ?? {};
  if (!blob.covered(0, blob.size)) {
    throw new StoreError(
      'E_INVALID_ARGUMENT',
      'blob is not complete locally; cannot verify from local bytes',
      {
        ...context,
        size: blob.size,
      },
    );
  }
  const windowBytes = Math.max(64 * 1024, Math.floor(opts.windowBytes ?? 8 * 1024 * 1024));
  const never = new AbortController().signal;
  const sig = signal ?? never;
  const runCpu = opts.runCpu ?? (<T>(fn: () => Promise<T>): Promise<T> => fn());
  const badSpans: Interval[] = [];
  let chunkErrors = 0;
  const fail = (err: StoreError, g: { start: number; end: number }): void => {
    chunkErrors++;
    const last = badSpans[badSpans.length - 1];
    if (last === undefined || last.end < g.start) badSpans.push({ start: g.start, end: g.end });
    else last.end = Math.max(last.end, g.end);
    opts.onChunkError?.(err);
  };

  const groups: Group[] = [];
  for (const g of groupChunks(opts.chunks)) {
    if (g.start < 0 || g.end > blob.size || g.end <= g.start) {
      for (const c of g.chunks) {
        chunkErrors++;
        opts.onChunkError?.(
          new StoreError('E_BAD_TOC', 'chunk span outside the blob', {
            ...context,
            offset: c.fileOffset,
            compressedOffset: c.compressedOffset,
            digest: c.digest,
          }),
        );
      }
      continue;
    }
    groups.push(g);
  }

  const hasher = new StreamDigest(opts.compression);
  let streamError: StoreError | undefined;
  const toStoreError = (err: unknown): StoreError =>
    err instanceof StoreError ? err : new StoreError('E_DECOMPRESS', String(err), context);
  try {
    let gi = 0;
    let pos = 0;
    while (pos < blob.size) {
      if (sig.aborted) throw sig.reason;
      let end = Math.min(blob.size, pos + windowBytes);
      let gj = gi;
      while (gj < groups.length && groups[gj]!.start < end) end = Math.max(end, groups[gj++]!.end);
      const buf = await blob.read(pos, end - pos);
      // The hasher consumes this window while its chunks are decoded. A stream that fails to
      // decompress stops the hashing, not the chunk pass: it finds the bad spans.
      const hashed =
        streamError === undefined
          ? hasher.write(buf, opts.beforePiece).catch((err: unknown) => {
              if (sig.aborted) throw err;
              streamError = toStoreError(err);
            })
          : Promise.resolve();
      hashed.catch(() => undefined);
      for (let k = gi; k < gj; k++) {
        const g = groups[k]!;
        const todo = g.chunks.filter((c) => {
          if (!opts.cache.has(c.digest)) return true;
          opts.onVerified?.(c);
          return false;
        });
        if (todo.length === 0) continue;
        const span = buf.subarray(g.start - pos, g.end - pos);
        let results: Array<Buffer | StoreError>;
        try {
          results = await runCpu(() => decodeChunks(opts.compression, span, todo, context), sig);
        } catch (err) {
          if (sig.aborted) throw err;
          for (let i = 0; i < todo.length; i++) {
            fail(toStoreError(err), g);
          }
          continue;
        }
        for (let i = 0; i < todo.length; i++) {
          const r = results[i]!;
          if (r instanceof StoreError) {
            fail(r, g);
            continue;
          }
          opts.onVerified?.(todo[i]!);
          await opts.cache.put(todo[i]!.digest, r);
        }
      }
      await hashed;
      gi = gj;
      pos = end;
    }
    if (streamError === undefined) {
      try {
        const stream = await hasher.end();
        return { stream, matched: stream.digest === opts.expectedDiffID, chunkErrors, badSpans };
      } catch (err) {
        streamError = toStoreError(err);
      }
    }
    return { streamError, matched: false, chunkErrors, badSpans };
  } finally {
    await hasher.destroy();
  }
}

/**
 * Non-zeros chunks grouped by compressed span (eStargz packs several small files into one gzip
 * member: the member is decoded once for all of them), sorted by offset.
 */
function groupChunks(chunks: readonly Chunk[]): Group[] {
  const sorted = chunks
    .filter((c) => c.zeros !== true)
    .sort((a, b) => a.compressedOffset - b.compressedOffset || a.compressedEnd - b.compressedEnd);
  const out: Group[] = [];
  for (const c of sorted) {
    const last = out[out.length - 1];
    if (last !== undefined && last.start === c.compressedOffset && last.end === c.compressedEnd)
      last.chunks.push(c);
    else out.push({ start: c.compressedOffset, end: c.compressedEnd, chunks: [c] });
  }
  return out;
}
