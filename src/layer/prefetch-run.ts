import type { Chunk } from '../format/model.js';
import type { Logger } from '../util/logger.js';
import type { ChunkLoader } from './chunk-loader.js';
import type { LayerStatus } from './layer-status.js';

export interface PrefetchRun {
  /** Chunks to prefetch, in blob order. */
  chunks: readonly Chunk[];
  /** Compressed bytes per batch (one request each). */
  batchBytes: number;
  /** Batches in flight at once. */
  parallel: number;
  loader: ChunkLoader;
  /**
   * `stage`: only bring the compressed bytes into the layer's local store (ChunkLoader.stage);
   * `load`: decode and verify the chunks into the cache (from local bytes when staged before).
   */
  mode: 'stage' | 'load';
  status: LayerStatus;
  signal: AbortSignal;
  logger: Logger;
  /** For the log line: where the prefetch region ends. */
  end: number;
}

/**
 * One pass of a layer's prefetch over its chunks, in batches of about `batchBytes` compressed
 * bytes at the prefetch tier, `parallel` at once (two for network passes, so that the next
 * request is on its way when one completes). A failed batch is recorded, not fatal (reads fetch
 * on demand). The first pass (whichever mode) marks the layer's prefetch done.
 */
export async function runPrefetch(r: PrefetchRun): Promise<void> {
  const started = Date.now();
  let batch: Chunk[] = [];
  let batchStart = 0;
  let failed = 0;
  const inFlight: Array<Promise<void>> = [];
  const flush = async (): Promise<void> => {
    if (batch.length === 0) return;
    const b = batch;
    batch = [];
    const done =
      r.mode === 'stage'
        ? r.loader.stage(b, { signal: r.signal })
        : r.loader.load(b, undefined, { priority: 'prefetch', signal: r.signal });
    inFlight.push(
      done.then(
        () => undefined,
        (err: unknown) => {
          failed++;
          r.status.recordError(err, 'prefetch batch failed');
        },
      ),
    );
    while (inFlight.length >= r.parallel) await inFlight.shift();
  };
  for (const c of r.chunks) {
    if (r.signal.aborted) break;
    if (batch.length > 0 && c.compressedEnd - batchStart > r.batchBytes) await flush();
    if (batch.length === 0) batchStart = c.compressedOffset;
    batch.push(c);
  }
  if (!r.signal.aborted) await flush();
  await Promise.all(inFlight);
  if (r.signal.aborted) return;
  r.status.prefetchDone = true;
  if (r.chunks.length > 0) {
    r.logger.debug(
      { chunks: r.chunks.length, end: r.end, failed, ms: Date.now() - started },
      r.mode === 'stage' ? 'prefetch staged' : 'prefetch done',
    );
  }
}
