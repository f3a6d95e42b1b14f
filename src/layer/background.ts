import type { ChunkCache } from '../cache/chunk-cache.js';
import { decodeChunk } from '../format/codec.js';
import type { Chunk, Compression } from '../format/model.js';
import { asStoreError, type ErrorContext } from '../util/errors.js';
import type { ChunkLoader } from './chunk-loader.js';
import { StreamDigest } from './diffid.js';
import type { FetchUnit } from './plan.js';
import type { FetchScheduler } from './scheduler.js';

export interface BackgroundContext {
  units: readonly FetchUnit[];
  loader: ChunkLoader;
  cache: ChunkCache;
  scheduler: FetchScheduler;
  compression: Compression;
  /** Hash the whole decompressed stream (for the DiffID check). */
  hash: boolean;
  /** Units of this layer in flight at once (memory bound: about window x unit size). */
  window: number;
  cancel: AbortSignal;
  context: ErrorContext;
  onVerified(chunk: Chunk): void;
  onChunkError(err: unknown): void;
}

export interface PassResult {
  /** sha256 and length of the decompressed stream, when hashing. */
  stream?: { digest: string; size: number };
  chunkErrors: number;
}

/**
 * One background pass over the blob, unit by unit in blob order: fetch each unit at background
 * priority (preemptible), decode + verify + cache the chunks not yet cached, and feed the unit's
 * bytes to the DiffID stream strictly in order.
 */
export async function backgroundPass(ctx: BackgroundContext): Promise<PassResult> {
  const stop = new AbortController();
  const onCancel = (): void => stop.abort(ctx.cancel.reason);
  ctx.cancel.addEventListener('abort', onCancel, { once: true });
  const hasher = ctx.hash ? new StreamDigest(ctx.compression) : undefined;
  let chunkErrors = 0;
  let chain: Promise<void> = Promise.resolve();
  const pending: Array<Promise<void>> = [];
  try {
    for (const unit of ctx.units) {
      if (stop.signal.aborted) throw stop.signal.reason;
      if (hasher === undefined && unit.chunks.every((c) => ctx.cache.has(c.digest))) {
        for (const c of unit.chunks) ctx.onVerified(c);
        continue;
      }
      const fetched = ctx.scheduler.background(async (signal) => {
        const [buf] = await ctx.loader.readRanges(
          [{ offset: unit.offset, length: unit.end - unit.offset }],
          signal,
        );
        chunkErrors += await decodeUnit(ctx, unit, buf!, stop.signal);
        return buf!;
      }, stop.signal);
      fetched.catch(() => undefined);
      chain = chain.then(async () => {
        const buf = await fetched;
        if (hasher !== undefined) await hasher.write(buf, () => ctx.scheduler.idle(stop.signal));
      });
      pending.push(chain);
      while (pending.length >= ctx.window) await pending.shift();
    }
    await Promise.all(pending);
    const stream = hasher !== undefined ? await hasher.end() : undefined;
    return stream !== undefined ? { stream, chunkErrors } : { chunkErrors };
  } catch (err) {
    stop.abort(err);
    throw err;
  } finally {
    ctx.cancel.removeEventListener('abort', onCancel);
    chain.catch(() => undefined);
    await hasher?.destroy();
  }
}

/**
 * Decode, verify and cache the unit's chunks one at a time, each as a background CPU step
 * (paused while on-demand work runs, one at a time across the store), so a background decode
 * never queues ahead of an on-demand one for long.
 */
async function decodeUnit(
  ctx: BackgroundContext,
  unit: FetchUnit,
  buf: Buffer,
  stop: AbortSignal,
): Promise<number> {
  let errors = 0;
  for (const c of unit.chunks) {
    if (ctx.cache.has(c.digest)) {
      ctx.onVerified(c);
      continue;
    }
    try {
      if (c.compressedOffset < unit.offset || c.compressedEnd > unit.end) {
        throw asStoreError(new Error('chunk span outside its fetch unit'), 'E_BAD_TOC', ctx.context);
      }
      const span = buf.subarray(c.compressedOffset - unit.offset, c.compressedEnd - unit.offset);
      const data = await ctx.scheduler.backgroundCpu(
        () => decodeChunk(ctx.compression, span, c, ctx.context),
        stop,
      );
      ctx.onVerified(c);
      await ctx.cache.put(c.digest, data);
    } catch (err) {
      if (stop.aborted) throw err;
      errors++;
      ctx.onChunkError(err);
    }
  }
  return errors;
}
