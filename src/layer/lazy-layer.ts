import type { ChunkCache } from '../cache/chunk-cache.js';
import { isSha256Digest } from '../cache/paths.js';
import { chunksForRange, type Chunk, type LayerIndex, type TreeNode } from '../format/model.js';
import { StoreError, asStoreError, type ErrorContext } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { asBlobSource } from '../util/blob-read.js';
import { assemble, someReleased } from './assemble.js';
import { readFromCache } from './cache-slices.js';
import { ChunkLoader, type LoadOptions } from './chunk-loader.js';
import { raceAbort, withDeadline } from '../util/abort.js';
import { planLayerAsync, type LayerPlan } from './plan.js';
import { FetchScheduler } from './scheduler.js';
import { SpanFetcher } from './span-fetcher.js';
import { loadLayerState } from './state-file.js';
import { releaseLocalBytes, runBackground } from './background-run.js';
import { LayerStatus } from './layer-status.js';
import { runPrefetch } from './prefetch-run.js';
import type { LayerState, ReadOptions } from './types.js';
import type { LazyLayerOptions } from './lazy-layer-options.js';

/** Compressed bytes per batch of a staged prefetch's decode pass. */
const DECODE_BATCH_BYTES = 1024 * 1024;

/** Digests of the chunks a read holds (zeros chunks have no buffer). */
function digestsOf(chunks: readonly Chunk[]): string[] {
  const out: string[] = [];
  for (const c of chunks) if (!c.zeros && isSha256Digest(c.digest)) out.push(c.digest);
  return out;
}

export type { LazyLayerOptions } from './lazy-layer-options.js';

let defaultScheduler: FetchScheduler | undefined;

/**
 * A lazily fetched layer: byte reads of its files served from verified chunks (memory, disk cache,
 * or one coalesced fetch), prefetch at start, low-priority background fetch of everything, and a
 * final check of the whole decompressed stream against the config's diff_id.
 */
export class LazyLayer {
  readonly index: LayerIndex;
  readonly layerKey: string;
  private readonly opts: LazyLayerOptions;
  private readonly cache: ChunkCache;
  private readonly scheduler: FetchScheduler;
  private readonly logger: Logger;
  private readonly loader: ChunkLoader;
  private readonly fetcher: SpanFetcher;
  /** Scheduler-clock time of the last on-demand read (background yields for a quiet period). */
  private lastReadAt: number | undefined;
  private readonly context: ErrorContext;
  private readonly deadlineMs: number;
  private readonly closing = new AbortController();
  /** Built asynchronously (start() / pin()); never on a synchronous path such as state(). */
  private planCache: LayerPlan | undefined;
  private planPromise: Promise<LayerPlan> | undefined;
  private pinRequested = false;
  private readonly status: LayerStatus;
  private started: Promise<void> | undefined;
  private prefetchPromise: Promise<void> = Promise.resolve();
  /** The staged prefetch's decode (see prefetch()). */
  private prefetchDecode: Promise<void> = Promise.resolve();
  /** Resolved by the layer's first read of file bytes. */
  private readonly firstRead: { promise: Promise<void>; resolve: () => void } = deferred();
  private backgroundPromise: Promise<void> = Promise.resolve();

  constructor(opts: LazyLayerOptions) {
    this.opts = opts;
    this.index = opts.index;
    this.layerKey = opts.layerKey;
    this.cache = opts.cache;
    this.scheduler = opts.scheduler ?? (defaultScheduler ??= new FetchScheduler());
    this.logger = (opts.logger ?? silentLogger).child({ layer: opts.layerKey });
    this.context = { layer: opts.layerKey };
    this.deadlineMs = opts.deadlineMs ?? 30_000;
    this.status = new LayerStatus(this.logger, this.context);
    if (opts.source.size !== opts.index.blobSize) {
      throw new StoreError('E_INVALID_ARGUMENT', 'blob source size differs from the layer index', {
        ...this.context,
        size: opts.source.size,
        blobSize: opts.index.blobSize,
      });
    }
    this.fetcher = new SpanFetcher({
      source: asBlobSource(opts.source),
      blobSize: opts.index.blobSize,
      localBytes: opts.local,
      onCompressedBytes: opts.local?.onCompressedBytes,
      onFetched: (n) => {
        this.status.bytesFetched += n;
      },
      logger: this.logger,
      context: this.context,
      // a span in flight for longer than a whole read may last is stuck (hung host): fetch it anew
      clock: this.scheduler.clock,
      staleJoinMs: this.deadlineMs,
    });
    this.loader = new ChunkLoader({
      fetcher: this.fetcher,
      cache: opts.cache,
      compression: opts.index.compression,
      blobSize: opts.index.blobSize,
      maxGap: opts.maxGap ?? 4096,
      prefetchMaxGap: opts.prefetchMaxGap ?? 1024 * 1024,
      logger: this.logger,
      context: this.context,
      runFetch: (priority, fn, signal, local) =>
        priority === 'prefetch'
          ? this.scheduler.prefetch(fn, signal)
          : priority === 'read-ahead'
            ? this.scheduler.readAhead(fn, local !== true)
            : this.scheduler.foreground(fn, local !== true),
      onVerified: (c) => this.status.markVerified(c),
      wasVerified: (c) => this.status.wasVerified(c),
      neighbours: () => this.planCache?.chunks,
    });
  }

  /** The layer's chunk plan, built once, in slices (huge TOCs must not stall the event loop). */
  private ensurePlan(): Promise<LayerPlan> {
    this.planPromise ??= planLayerAsync(this.index).then((plan) => {
      this.planCache = plan;
      return plan;
    });
    return this.planPromise;
  }

  /**
   * Begin prefetch, then background fetch (as configured). Idempotent; returns at once — use
   * whenPrefetched() / whenBackgroundDone() to wait.
   */
  start(): void {
    if (this.started !== undefined) return;
    // a layer is started when a client resolves it, just before it reads it: the background
    // fetch waits a quiet period from here too
    this.lastReadAt ??= this.scheduler.clock.now();
    this.started = (async () => {
      await this.ensurePlan();
      if (this.opts.stateDir !== undefined && this.opts.expectedDiffID !== undefined) {
        const saved = await loadLayerState(this.opts.stateDir, this.layerKey);
        if (saved?.fullyVerified && saved.diffID === this.opts.expectedDiffID) {
          this.status.markFullyVerified();
          releaseLocalBytes(this.opts, this.status);
          if (Number.isSafeInteger(saved.uncompressedSize) && saved.uncompressedSize! >= 0) {
            this.status.uncompressedSize = saved.uncompressedSize;
          }
        }
      }
    })().catch((err: unknown) => this.recordError(err, 'layer start-up failed'));
    // Each stage ends in a catch: an unexpected throw is recorded, never an unhandled rejection
    // (which would take the whole FUSE server down).
    this.prefetchPromise = this.started
      .then(async () => {
        if (this.planCache !== undefined) await this.prefetch(this.planCache);
      })
      .catch((err: unknown) => this.recordError(err, 'prefetch failed'));
    this.backgroundPromise = this.prefetchPromise
      .then(async () => {
        if (this.opts.backgroundFetch === false || this.planCache === undefined) return;
        await runBackground({
          plan: this.planCache,
          index: this.index,
          opts: this.opts,
          fetcher: this.fetcher,
          cache: this.cache,
          scheduler: this.scheduler,
          status: this.status,
          logger: this.logger,
          context: this.context,
          signal: this.closing.signal,
          lastRead: () => this.lastReadAt,
        });
      })
      .catch((err: unknown) => this.recordError(err, 'background fetch failed'));
  }

  whenPrefetched(): Promise<void> {
    return this.prefetchPromise;
  }

  /** A staged prefetch decoded (it waits for the layer's first read; see prefetch()). */
  async whenPrefetchDecoded(): Promise<void> {
    await this.prefetchPromise;
    await this.prefetchDecode;
  }

  whenBackgroundDone(): Promise<void> {
    return this.backgroundPromise;
  }

  /**
   * Bytes [offset, offset+length) of regular file `node` (clipped at its size), verified.
   * Rejects with E_DEADLINE after the deadline (the fetch stops unless another caller waits for it),
   * E_ABORTED on the signal, E_LAYER_BAD once the layer failed its DiffID check, and
   * E_DIGEST_MISMATCH / E_DECOMPRESS / registry errors for the chunks involved.
   * The result may share memory with the cache: treat it as read-only.
   */
  async read(node: TreeNode, offset: number, length: number, opts: ReadOptions = {}): Promise<Buffer> {
    if (this.status.badError !== undefined) throw this.status.badError;
    if (node.type !== 'reg') {
      throw new StoreError('E_INVALID_ARGUMENT', 'not a regular file', { ...this.context, path: node.path });
    }
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
      throw new StoreError('E_INVALID_ARGUMENT', 'invalid read range', {
        ...this.context,
        path: node.path,
        offset,
        length,
      });
    }
    this.lastReadAt = this.scheduler.clock.now();
    this.firstRead.resolve();
    const end = Math.min(node.size, offset + length);
    if (offset >= end) return Buffer.alloc(0);
    const chunks = chunksForRange(node, offset, end - offset);
    const mem = this.loader.tryMemory(chunks);
    if (mem !== undefined) {
      const out = assemble(node, chunks, mem, offset, end, this.context, opts.transient === true);
      this.served(chunks, offset, end);
      return out;
    }
    // the path is spelled from the tree's parents: once per read that is not a memory hit
    const ctx = { ...this.context, path: node.path, offset };
    // aborted when this read stops waiting (deadline, interrupt): a fetch nobody else waits for
    // stops; a read failing on one chunk leaves its other chunks' fetches to fill the cache
    const gaveUp = new AbortController();
    const work = readFromCache(this.cache, chunks, offset, end).then(async (hit) => {
      if (hit !== undefined) {
        for (const c of chunks) if (!c.zeros) this.status.markVerified(c);
        this.served(chunks, offset, end);
        return hit;
      }
      // the buffers of chunks that arrive first are held while the others load: borrowed, so the
      // cache does not release them meanwhile (given back after the copy, or the view's turn)
      const giveBack = this.cache.borrow(digestsOf(chunks));
      try {
        // waiting, also on a read-ahead fetch it joined: prefetch holds back meanwhile
        const bufs = await this.scheduler.onDemand(() =>
          this.loader.load(chunks, { path: ctx.path }, { giveUp: gaveUp.signal, file: node.chunks }),
        );
        // never assemble from a released buffer (it reads as empty): a bug, reported, not served
        if (someReleased(chunks, bufs)) {
          throw new StoreError('E_IO', 'chunk buffer released while a read held it', ctx);
        }
        if (this.status.badError !== undefined) throw this.status.badError;
        const out = assemble(node, chunks, bufs, offset, end, ctx, opts.transient === true);
        this.served(chunks, offset, end);
        return out;
      } finally {
        giveBack();
      }
    });
    try {
      return await withDeadline(opts.deadlineMs ?? this.deadlineMs, () => work, {
        signal: opts.signal,
        context: ctx,
        what: 'read',
      });
    } catch (err) {
      const e = asStoreError(err, 'E_IO', ctx);
      if (e.code === 'E_DEADLINE' || e.code === 'E_ABORTED') gaveUp.abort(e);
      this.status.lastError = `${e.code}: ${e.message}`;
      throw e;
    }
  }

  /**
   * File bytes [offset, end) went to a reader: each chunk's memory copy is told how much of it was
   * served (ChunkCache.consumed), and whether its compressed bytes are held locally.
   */
  private served(chunks: readonly Chunk[], offset: number, end: number): void {
    for (const c of chunks) {
      if (c.zeros || !isSha256Digest(c.digest)) continue;
      const bytes = Math.min(end, c.fileOffset + c.size) - Math.max(offset, c.fileOffset);
      this.cache.consumed(c.digest, bytes, this.fetcher.holdsLocally(c.compressedOffset, c.compressedEnd));
    }
  }

  /**
   * Make `chunks` verified and cached at `priority` ('prefetch': the preemptible tier below
   * on-demand reads), sharing every span already in flight. Resolves when done; rejects with the
   * first chunk error.
   */
  async loadChunks(chunks: readonly Chunk[], opts: LoadOptions = {}): Promise<void> {
    if (this.status.badError !== undefined) throw this.status.badError;
    await this.loader.load(chunks, undefined, opts);
  }

  // --- read-ahead hook (src/layer/read-ahead.ts); keep this method when reworking the engine ---
  /**
   * Load (fetch + verify + cache) the chunks of regular file `node` covering [offset,
   * offset+length) without returning bytes: read-ahead for a sequential reader, so its next reads
   * find verified chunks in the cache. Chunks already cached (memory or disk) are skipped; nothing
   * starts once `signal` is aborted (a running fetch completes). Rejects like read() (the caller
   * only logs: the reader's own read reports errors); no deadline, it ends when its fetch does.
   */
  async prefetchRange(
    node: TreeNode,
    offset: number,
    length: number,
    signal?: AbortSignal,
    onProgress?: (fraction: number) => void,
  ): Promise<void> {
    if (this.status.badError !== undefined || signal?.aborted || node.type !== 'reg') return;
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length <= 0) return;
    const end = Math.min(node.size, offset + length);
    if (offset >= end) return;
    // Skipped too: chunks verified before whose compressed bytes are held locally. Their memory copy
    // went once a reader had all of their bytes (ChunkCache.consumed), which the kernel keeps;
    // decoding them again ahead of a reader that already had them is wasted work.
    const wanted = chunksForRange(node, offset, end - offset).filter(
      (c) =>
        !c.zeros &&
        !(isSha256Digest(c.digest) && this.cache.has(c.digest)) &&
        !(this.status.wasVerified(c) && this.fetcher.holdsLocally(c.compressedOffset, c.compressedEnd)),
    );
    if (wanted.length === 0) return;
    // progress: the share of these chunks' compressed spans received (members shared by several
    // chunks counted once); read-around bytes riding along may take it past 1
    let received = 0;
    const total = new Map(wanted.map((c) => [c.compressedOffset, c.compressedEnd - c.compressedOffset]));
    const expected = [...total.values()].reduce((a, n) => a + n, 0);
    const onReceived =
      onProgress === undefined || !(expected > 0)
        ? undefined
        : (n: number): void => {
            received += n;
            onProgress(Math.min(1, received / expected));
          };
    // Read-ahead tier (fetched like an on-demand read, without holding prefetch back): the reader
    // is about to ask for these bytes. An abort (file closed, reader jumped elsewhere) drops loads
    // still queued, but a fetch already running is finished into the cache on purpose, not given
    // up: aborting it would throw away the bytes received, and a reader coming back fetches them
    // again (measured: +19% registry bytes in the mixed sequential/random test of
    // store-fs-read-ahead.test.ts). It ends within the request timeout.
    await this.loader.load(
      wanted,
      { path: node.path },
      {
        file: node.chunks,
        readAhead: true,
        ...(signal !== undefined ? { signal } : {}),
        ...(onReceived !== undefined ? { onReceived } : {}),
      },
    );
  }
  // --- end read-ahead hook ---

  /** A snapshot; cheap and synchronous (chunk totals read 0 until the plan exists). */
  state(): LayerState {
    const plan = this.planCache;
    const total = plan?.totalChunkBytes ?? 0;
    let percent = 0;
    const st = this.status;
    if (st.fullyVerified) percent = 100;
    else if (plan !== undefined) {
      percent = total === 0 ? 100 : Math.min(100, Math.floor((100 * st.verifiedBytes) / total));
    }
    const s: LayerState = {
      bytesFetched: st.bytesFetched,
      totalBytes: this.index.blobSize,
      percent,
      // a fully verified layer keeps no per-chunk record (LayerStatus.markFullyVerified)
      chunksVerified: st.fullyVerified ? (plan?.chunks.length ?? 0) : st.chunksVerified,
      chunksTotal: plan?.chunks.length ?? 0,
      prefetchDone: st.prefetchDone,
      backgroundDone: st.backgroundDone,
      fullyVerified: st.fullyVerified,
      bad: st.badError !== undefined,
      pinned: this.cache.isPinned(this.layerKey),
    };
    if (st.lastError !== undefined) s.lastError = st.lastError;
    if (st.uncompressedSize !== undefined) s.uncompressedSize = st.uncompressedSize;
    return s;
  }

  /**
   * Keep every chunk of this layer in the cache (never evicted) until unpin(). The layer counts
   * as pinned at once; its chunk digests join the pin as soon as the plan exists.
   */
  pin(): void {
    this.pinRequested = true;
    this.cache.pin(this.layerKey, this.planCache?.chunks.map((c) => c.digest) ?? []);
    if (this.planCache !== undefined) return;
    this.ensurePlan().then(
      (plan) => {
        if (this.pinRequested)
          this.cache.pin(
            this.layerKey,
            plan.chunks.map((c) => c.digest),
          );
      },
      (err: unknown) => this.recordError(err, 'cannot plan the layer for pinning'),
    );
  }

  unpin(): void {
    this.pinRequested = false;
    this.cache.unpin(this.layerKey);
  }

  /** Stop prefetch/background work. Reads already in flight finish; the cache is not closed. */
  async close(): Promise<void> {
    this.closing.abort(new StoreError('E_ABORTED', 'layer closed', this.context));
    await this.prefetchPromise.catch(() => undefined);
    await this.prefetchDecode.catch(() => undefined);
    await this.backgroundPromise.catch(() => undefined);
  }

  private recordError(err: unknown, what: string): void {
    this.status.recordError(err, what);
  }

  private prefetchEnd(): number {
    if (this.opts.prefetch === false) return 0;
    const hint = this.index.prefetch;
    if (hint.kind === 'none') return 0;
    if (hint.kind === 'landmark') return hint.end;
    return Math.min(this.index.blobSize, Math.max(0, this.opts.prefetchBytes ?? 0));
  }

  /**
   * The start-up prefetch. With a local compressed store it is staged: the compressed bytes are
   * fetched now (the client is still pulling: on a slow link they arrive meanwhile) and decoded
   * once the layer's files are first read (the container runs), at the prefetch tier, ahead of
   * its reads. Decoding while the client pulled took CPU from its own work (optimised image,
   * loopback, same runs: pull 0.47-0.71 s against 0.35-0.55 staged), and the decoded chunks of a
   * layer nobody reads waited in the memory LRU. Without a local store the chunks are loaded now.
   * The background fetch waits for the first part only.
   */
  private async prefetch(plan: LayerPlan): Promise<void> {
    const end = this.prefetchEnd();
    const chunks = plan.chunks.filter((c) => c.compressedOffset < end);
    const run = {
      chunks,
      batchBytes: this.opts.prefetchBatchBytes ?? 4 * 1024 * 1024,
      parallel: 2,
      loader: this.loader,
      status: this.status,
      signal: this.closing.signal,
      logger: this.logger,
      end,
    };
    if (!this.loader.keepsBytes || chunks.length === 0) {
      await runPrefetch({ ...run, mode: 'load' });
      return;
    }
    await runPrefetch({ ...run, mode: 'stage' });
    // from local bytes: no round trip to hide, so small steps one at a time, which yield to the
    // container's reads and keep little in memory beside them (optimised model-load, 8 runs each:
    // peak RSS 140-149 vs 143-155 MB; start-up p50 1.10 vs 1.16 s loopback, 2.14 vs 2.18 at 100
    // Mbit, against 4 MiB batches two at a time)
    this.prefetchDecode = raceAbort(this.firstRead.promise, this.closing.signal)
      .then(() => runPrefetch({ ...run, mode: 'load', batchBytes: DECODE_BATCH_BYTES, parallel: 1 }))
      .catch((err: unknown) => {
        if (!this.closing.signal.aborted) this.recordError(err, 'prefetch decode failed');
      });
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
