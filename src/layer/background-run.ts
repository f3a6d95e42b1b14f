import type { ChunkCache } from '../cache/chunk-cache.js';
import type { LayerIndex } from '../format/model.js';
import { sleep } from '../util/abort.js';
import { StoreError, asStoreError, type ErrorContext } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { layerStateWriteFaults } from '../util/write-faults.js';
import { backgroundPass } from './background.js';
import type { StreamDigestResult } from './diffid.js';
import type { LayerStatus } from './layer-status.js';
import type { LazyLayerOptions } from './lazy-layer-options.js';
import { planUnits, type LayerPlan } from './plan.js';
import type { FetchScheduler } from './scheduler.js';
import type { SpanFetcher } from './span-fetcher.js';
import { saveLayerState } from './state-file.js';

/** What the background fetch of one layer works with (the LazyLayer's parts). */
export interface BackgroundRun {
  plan: LayerPlan;
  index: LayerIndex;
  opts: LazyLayerOptions;
  fetcher: SpanFetcher;
  cache: ChunkCache;
  scheduler: FetchScheduler;
  status: LayerStatus;
  logger: Logger;
  context: ErrorContext;
  /** Aborted when the layer closes. */
  signal: AbortSignal;
  /** Clock time of the layer's last on-demand read: passes yield to reads. */
  lastRead(): number | undefined;
}

/** Fully verified: the local compressed copy is no longer needed (its chunks are cached). */
export function releaseLocalBytes(opts: LazyLayerOptions, status: LayerStatus): void {
  opts.local
    ?.discard?.()
    .catch((err: unknown) => status.recordError(err, 'cannot remove the local blob copy'));
}

/** Before a re-check from the origin: local compressed bytes may be what was bad. */
async function forgetLocalBytes(r: BackgroundRun): Promise<void> {
  await r.opts.local
    ?.forget?.()
    .catch((err: unknown) => r.status.recordError(err, 'cannot reset the local blob copy'));
}

/**
 * Background passes over the whole blob (fetch, verify and cache every chunk; hash the stream
 * when a diff_id is expected), retried with a growing delay. A DiffID mismatch is checked once
 * more with freshly fetched bytes before the layer is declared bad: a corrupted cache or proxy on
 * the way must not condemn a good layer.
 */
export async function runBackground(r: BackgroundRun): Promise<void> {
  const { opts, status } = r;
  const passes = opts.maxBackgroundPasses ?? 3;
  const units = planUnits(r.plan, r.index.blobSize, opts.backgroundUnitBytes ?? 2 * 1024 * 1024);
  let recheck = false;
  for (let attempt = 1; attempt <= passes; attempt++) {
    if (r.signal.aborted) return;
    const hash = opts.expectedDiffID !== undefined && !status.fullyVerified;
    const started = Date.now();
    try {
      const result = await backgroundPass({
        units,
        fetcher: r.fetcher,
        lastRead: r.lastRead,
        settle: opts.local?.settle?.bind(opts.local),
        cache: r.cache,
        scheduler: r.scheduler,
        compression: r.index.compression,
        hash,
        window: Math.max(1, opts.backgroundWindow ?? 2),
        cancel: r.signal,
        context: r.context,
        bypassCache: recheck,
        onVerified: (c) => status.markVerified(c),
        onChunkError: (err) => status.recordError(err, 'background chunk verification failed'),
      });
      if (result.chunkErrors > 0) {
        throw new StoreError(
          'E_DIGEST_MISMATCH',
          `${result.chunkErrors} chunk(s) failed verification`,
          r.context,
        );
      }
      status.backgroundDone = true;
      if (result.stream !== undefined) {
        const matched = await checkDiffID(r, result.stream, recheck);
        if (!matched && !recheck) {
          recheck = true;
          await forgetLocalBytes(r);
          attempt--; // the re-check is not a failed attempt
          continue;
        }
      }
      r.logger.info(
        { ms: Date.now() - started, bytesFetched: status.bytesFetched, fullyVerified: status.fullyVerified },
        'background fetch complete',
      );
      return;
    } catch (err) {
      if (r.signal.aborted) return;
      status.recordError(err, `background fetch pass ${attempt} failed`);
      // bad data (a stream that does not decompress, chunks failing verification) may come from
      // a bad local copy: the next pass fetches from the origin
      const code = asStoreError(err, 'E_IO').code;
      if (code === 'E_DECOMPRESS' || code === 'E_DIGEST_MISMATCH') {
        recheck = true;
        await forgetLocalBytes(r);
      }
      if (attempt < passes)
        await sleep((opts.retryDelayMs ?? 30_000) * attempt, r.signal).catch(() => undefined);
    }
  }
}

/**
 * Compare the stream with the config's diff_id. A match is remembered (and persisted); a
 * mismatch marks the layer bad only when `final` (after the fresh re-check pass).
 */
async function checkDiffID(r: BackgroundRun, stream: StreamDigestResult, final: boolean): Promise<boolean> {
  const { status } = r;
  const expected = r.opts.expectedDiffID!;
  const layerKey = r.opts.layerKey;
  const padding = stream.padded?.find((p) => p.digest === expected);
  if (padding !== undefined) {
    r.logger.warn(
      { expected, paddingBytes: padding.bytes },
      'layer stream matches the diff_id once the zero padding after the tar end is added (zstd:chunked written without it); accepted',
    );
  }
  if (stream.digest === expected || padding !== undefined) {
    const size = stream.size + (padding?.bytes ?? 0);
    status.markFullyVerified();
    status.uncompressedSize = size;
    releaseLocalBytes(r.opts, status);
    if (r.opts.stateDir !== undefined) {
      await saveLayerState(r.opts.stateDir, {
        layerKey,
        diffID: expected,
        fullyVerified: true,
        verifiedAt: new Date().toISOString(),
        uncompressedSize: size,
      }).then(
        () => layerStateWriteFaults.succeeded(r.logger),
        (err: unknown) => {
          // one warning per condition store-wide (a full disk fails every layer's state file)
          const e = asStoreError(err, 'E_IO', r.context);
          status.lastError = `${e.code}: ${e.message}`;
          layerStateWriteFaults.failed(err, r.logger, { layer: layerKey });
        },
      );
    }
    return true;
  }
  const context = { ...r.context, expected, actual: stream.digest, uncompressedSize: stream.size };
  if (!final) {
    const error = new StoreError(
      'E_DIGEST_MISMATCH',
      `layer stream does not match the diff_id (expected ${expected}, got ${stream.digest}); re-checking with freshly fetched bytes`,
      context,
    );
    status.lastError = `${error.code}: ${error.message}`;
    r.logger.warn({ err: error }, 'DiffID mismatch; re-checking');
    return false;
  }
  const error = new StoreError(
    'E_LAYER_BAD',
    `layer content does not match the image config diff_id: expected ${expected}, got ${stream.digest}`,
    context,
  );
  status.lastError = `${error.code}: ${error.message}`;
  status.badError = error;
  r.logger.error({ err: error }, 'layer marked bad');
  return false;
}
