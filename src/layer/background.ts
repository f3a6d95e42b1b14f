import type { ChunkCache } from '../cache/chunk-cache.js';
import { decodeChunks } from '../format/codec.js';
import type { Chunk, Compression } from '../format/model.js';
import { raceAbort } from '../util/abort.js';
import { crashPoint } from '../util/crash-points.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { recordBackgroundBytes } from '../util/metrics.js';
import { releaseBuffer } from '../util/release-buffer.js';
import { StreamDigest, type StreamDigestResult } from './diffid.js';
import type { FetchUnit } from './plan.js';
import type { FetchScheduler } from './scheduler.js';
import type { SpanFetcher } from './span-fetcher.js';

export interface BackgroundContext {
  units: readonly FetchUnit[];
  fetcher: SpanFetcher;
  cache: ChunkCache;
  scheduler: FetchScheduler;
  compression: Compression;
  /** Hash the whole decompressed stream (for the DiffID check). */
  hash: boolean;
  /** Units of this layer in flight at once (memory bound: about window x unit size). */
  window: number;
  cancel: AbortSignal;
  context: ErrorContext;
  /** Fetch from the origin, bypassing local compressed bytes and caches (the DiffID re-check pass). */
  bypassCache?: boolean;
  /** Clock time of the layer's last on-demand read (undefined: none): the pass yields to reads. */
  lastRead(): number | undefined;
  /** The local compressed copy's backpressure (LocalCompressedStore.settle), awaited per unit. */
  settle?: (() => Promise<void>) | undefined;
  onVerified(chunk: Chunk): void;
  onChunkError(err: unknown): void;
}

export interface PassResult {
  /** sha256 and length of the decompressed stream, when hashing. */
  stream?: StreamDigestResult;
  chunkErrors: number;
}

/**
 * One background pass over the blob, unit by unit in blob order: fetch each unit at background
 * priority (preemptible), decode + verify + cache the chunks not yet cached, and feed the unit's
 * bytes to the DiffID stream strictly in order. A hashing pass first waits for one of the
 * scheduler's store-wide hash slots.
 */
export async function backgroundPass(ctx: BackgroundContext): Promise<PassResult> {
  if (!ctx.hash) return await runPass(ctx);
  return await ctx.scheduler.withHashSlot(() => runPass(ctx), ctx.cancel);
}

async function runPass(ctx: BackgroundContext): Promise<PassResult> {
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
      if (hasher === undefined && unit.chunks.every((c) => ctx.cache.onDisk(c.digest))) {
        for (const c of unit.chunks) ctx.onVerified(c);
        continue;
      }
      // a unit starts only once the layer's files have not been read for the quiet period
      await ctx.scheduler.layerQuiet(ctx.lastRead, stop.signal);
      const length = unit.end - unit.offset;
      const fetched = ctx.scheduler.background(async (signal) => {
        await ctx.scheduler.takeBandwidth(length, signal);
        // preempted: this unit's request is aborted (unless an on-demand read joined it) and the
        // unit re-run later; units already received were delivered and are never fetched again
        const lease = await ctx.fetcher.fetchLeased([{ offset: unit.offset, length }], {
          priority: 'background',
          signal,
          bypassCache: ctx.bypassCache === true,
        });
        const buf = lease.bufs[0]!;
        recordBackgroundBytes(buf.length);
        chunkErrors += await decodeUnit(ctx, unit, buf, stop.signal);
        return lease;
      }, stop.signal);
      fetched.catch(() => undefined);
      chain = chain.then(async () => {
        const lease = await fetched;
        if (ctx.settle !== undefined) await raceAbort(ctx.settle(), stop.signal);
        if (hasher !== undefined) await hasher.write(lease.bufs[0]!, () => ctx.scheduler.idle(stop.signal));
        lease.release();
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
 * Decode, verify and cache the unit's chunks, each as a background CPU step (paused while
 * on-demand work runs, one at a time across the store), so a background decode never queues
 * ahead of an on-demand one for long. Chunks sharing one member are one step: the member is
 * decoded once for all of them.
 */
async function decodeUnit(
  ctx: BackgroundContext,
  unit: FetchUnit,
  buf: Buffer,
  stop: AbortSignal,
): Promise<number> {
  let errors = 0;
  const groups = new Map<string, Chunk[]>();
  for (const c of unit.chunks) {
    if (ctx.cache.onDisk(c.digest)) {
      ctx.onVerified(c);
      continue;
    }
    // decoded by a read and kept in memory only (chunk-loader.ts): written as it is
    if (await ctx.cache.persist(c.digest, c.size)) {
      ctx.onVerified(c);
      continue;
    }
    if (c.compressedOffset < unit.offset || c.compressedEnd > unit.end) {
      errors++;
      ctx.onChunkError(
        new StoreError('E_BAD_TOC', 'chunk span outside its fetch unit', {
          ...ctx.context,
          offset: c.fileOffset,
          compressedOffset: c.compressedOffset,
          digest: c.digest,
        }),
      );
      continue;
    }
    const key = `${c.compressedOffset}:${c.compressedEnd}`;
    const group = groups.get(key);
    if (group === undefined) groups.set(key, [c]);
    else group.push(c);
  }
  for (const group of groups.values()) {
    crashPoint('background-unit');
    const first = group[0]!;
    const span = buf.subarray(first.compressedOffset - unit.offset, first.compressedEnd - unit.offset);
    let results: Array<Buffer | StoreError>;
    try {
      results = await ctx.scheduler.backgroundCpu(
        () => decodeChunks(ctx.compression, span, group, ctx.context),
        stop,
      );
    } catch (err) {
      if (stop.aborted) throw err;
      errors += group.length;
      ctx.onChunkError(err);
      continue;
    }
    for (let i = 0; i < group.length; i++) {
      const r = results[i]!;
      if (r instanceof StoreError) {
        errors++;
        ctx.onChunkError(r);
        continue;
      }
      ctx.onVerified(group[i]!);
      // written to disk and nobody else holds it: its memory goes now, not at the next collection
      if (!(await ctx.cache.put(group[i]!.digest, r, { memory: false }))) releaseBuffer(r);
    }
  }
  return errors;
}
