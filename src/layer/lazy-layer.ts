import type { ChunkCache } from '../cache/chunk-cache.js';
import { isValidDigest } from '../cache/paths.js';
import { chunksForRange, type Chunk, type LayerIndex, type TreeNode } from '../format/model.js';
import { StoreError, asStoreError, type ErrorContext } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { backgroundPass } from './background.js';
import { asBlobSource } from '../util/blob-read.js';
import { assemble } from './assemble.js';
import { ChunkLoader, type LoadOptions } from './chunk-loader.js';
import { sleep, withDeadline } from '../util/abort.js';
import { planLayerAsync, planUnits, type LayerPlan } from './plan.js';
import { FetchScheduler } from './scheduler.js';
import { SpanFetcher } from './span-fetcher.js';
import { layerStateWriteFaults } from '../util/write-faults.js';
import { loadLayerState, saveLayerState } from './state-file.js';
import type { LayerState, ReadOptions } from './types.js';
import type { LazyLayerOptions } from './lazy-layer-options.js';

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
  private uncompressedSize: number | undefined;
  private readonly verified = new Set<string>();
  private verifiedBytes = 0;
  private bytesFetched = 0;
  private prefetchDone = false;
  private backgroundDone = false;
  private fullyVerified = false;
  private badError: StoreError | undefined;
  private lastError: string | undefined;
  private started: Promise<void> | undefined;
  private prefetchPromise: Promise<void> = Promise.resolve();
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
        this.bytesFetched += n;
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
      runFetch: (priority, fn, signal) =>
        priority === 'prefetch' ? this.scheduler.prefetch(fn, signal) : this.scheduler.foreground(fn),
      onVerified: (c) => this.markVerified(c),
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
          this.fullyVerified = true;
          this.releaseLocalBytes();
          if (Number.isSafeInteger(saved.uncompressedSize) && saved.uncompressedSize! >= 0) {
            this.uncompressedSize = saved.uncompressedSize;
          }
        }
      }
    })().catch((err: unknown) => this.recordError(err, 'layer start-up failed'));
    // Each stage ends in a catch: an unexpected throw is recorded, never an unhandled rejection
    // (which would take the whole FUSE server down).
    this.prefetchPromise = this.started
      .then(async () => {
        if (this.planCache !== undefined) await this.runPrefetch(this.planCache);
      })
      .catch((err: unknown) => this.recordError(err, 'prefetch failed'));
    this.backgroundPromise = this.prefetchPromise
      .then(async () => {
        if (this.opts.backgroundFetch === false || this.planCache === undefined) return;
        await this.runBackground(this.planCache);
      })
      .catch((err: unknown) => this.recordError(err, 'background fetch failed'));
  }

  whenPrefetched(): Promise<void> {
    return this.prefetchPromise;
  }

  whenBackgroundDone(): Promise<void> {
    return this.backgroundPromise;
  }

  /**
   * Bytes [offset, offset+length) of regular file `node` (clipped at its size), verified.
   * Rejects with E_DEADLINE after the deadline (the fetch continues and fills the cache),
   * E_ABORTED on the signal, E_LAYER_BAD once the layer failed its DiffID check, and
   * E_DIGEST_MISMATCH / E_DECOMPRESS / registry errors for the chunks involved.
   * The result may share memory with the cache: treat it as read-only.
   */
  async read(node: TreeNode, offset: number, length: number, opts: ReadOptions = {}): Promise<Buffer> {
    if (this.badError !== undefined) throw this.badError;
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
    const end = Math.min(node.size, offset + length);
    if (offset >= end) return Buffer.alloc(0);
    const chunks = chunksForRange(node, offset, end - offset);
    const mem = this.loader.tryMemory(chunks);
    if (mem !== undefined) return assemble(node, chunks, mem, offset, end, this.context);
    const ctx = { ...this.context, path: node.path, offset };
    const work = this.loader.load(chunks, { path: node.path }).then((bufs) => {
      if (this.badError !== undefined) throw this.badError;
      return assemble(node, chunks, bufs, offset, end, ctx);
    });
    try {
      return await withDeadline(opts.deadlineMs ?? this.deadlineMs, () => work, {
        signal: opts.signal,
        context: ctx,
        what: 'read',
      });
    } catch (err) {
      const e = asStoreError(err, 'E_IO', ctx);
      this.lastError = `${e.code}: ${e.message}`;
      throw e;
    }
  }

  /**
   * Make `chunks` verified and cached at `priority` ('prefetch': the preemptible tier below
   * on-demand reads), sharing every span already in flight. Resolves when done; rejects with the
   * first chunk error.
   */
  async loadChunks(chunks: readonly Chunk[], opts: LoadOptions = {}): Promise<void> {
    if (this.badError !== undefined) throw this.badError;
    await this.loader.load(chunks, undefined, opts);
  }

  // --- read-ahead hook (src/layer/read-ahead.ts); keep this method when reworking the engine ---
  /**
   * Load (fetch + verify + cache) the chunks of regular file `node` covering [offset,
   * offset+length) without returning bytes: read-ahead for a sequential reader, so its next reads
   * find verified chunks in the cache. Chunks already cached (memory or disk) are skipped; nothing
   * starts once `signal` is aborted. Rejects like read() (the caller only logs: the reader's own
   * read reports errors); no deadline, it ends when its fetch does.
   */
  async prefetchRange(node: TreeNode, offset: number, length: number, signal?: AbortSignal): Promise<void> {
    if (this.badError !== undefined || signal?.aborted || node.type !== 'reg') return;
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length <= 0) return;
    const end = Math.min(node.size, offset + length);
    if (offset >= end) return;
    const wanted = chunksForRange(node, offset, end - offset).filter(
      (c) => !c.zeros && !(isValidDigest(c.digest) && this.cache.has(c.digest)),
    );
    if (wanted.length === 0) return;
    // On-demand tier: the reader is about to ask for these bytes; waiting only is cancelled.
    await this.loader.load(wanted, { path: node.path }, signal === undefined ? {} : { signal });
  }
  // --- end read-ahead hook ---

  /** A snapshot; cheap and synchronous (chunk totals read 0 until the plan exists). */
  state(): LayerState {
    const plan = this.planCache;
    const total = plan?.totalChunkBytes ?? 0;
    let percent = 0;
    if (plan !== undefined) {
      percent = total === 0 ? 100 : Math.min(100, Math.floor((100 * this.verifiedBytes) / total));
    }
    const s: LayerState = {
      bytesFetched: this.bytesFetched,
      totalBytes: this.index.blobSize,
      percent,
      chunksVerified: this.verified.size,
      chunksTotal: plan?.chunks.length ?? 0,
      prefetchDone: this.prefetchDone,
      backgroundDone: this.backgroundDone,
      fullyVerified: this.fullyVerified,
      bad: this.badError !== undefined,
      pinned: this.cache.isPinned(this.layerKey),
    };
    if (this.lastError !== undefined) s.lastError = this.lastError;
    if (this.uncompressedSize !== undefined) s.uncompressedSize = this.uncompressedSize;
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
    await this.backgroundPromise.catch(() => undefined);
  }

  private markVerified(c: Chunk): void {
    // zeros chunks need no data, so they are not part of chunksTotal either
    if (c.zeros || this.verified.has(c.digest)) return;
    this.verified.add(c.digest);
    this.verifiedBytes += c.size;
  }

  /** Fully verified: the local compressed copy is no longer needed (its chunks are cached). */
  private releaseLocalBytes(): void {
    this.opts.local
      ?.discard?.()
      .catch((err: unknown) => this.recordError(err, 'cannot remove the local blob copy'));
  }

  /** Before a re-check from the origin: local compressed bytes may be what was bad. */
  private async forgetLocalBytes(): Promise<void> {
    await this.opts.local
      ?.forget?.()
      .catch((err: unknown) => this.recordError(err, 'cannot reset the local blob copy'));
  }

  /** Remember an error for state() and log it. Never throws: it is the last line of defence. */
  private recordError(err: unknown, what: string): void {
    const e = asStoreError(err, 'E_IO', this.context);
    this.lastError = `${e.code}: ${e.message}`;
    try {
      this.logger.warn({ err: e }, what);
    } catch {
      // a failing logger must not turn a recorded error into an unhandled one
    }
  }

  private prefetchEnd(): number {
    if (this.opts.prefetch === false) return 0;
    const hint = this.index.prefetch;
    if (hint.kind === 'none') return 0;
    if (hint.kind === 'landmark') return hint.end;
    return Math.min(this.index.blobSize, Math.max(0, this.opts.prefetchBytes ?? 0));
  }

  private async runPrefetch(plan: LayerPlan): Promise<void> {
    const end = this.prefetchEnd();
    const batchBytes = this.opts.prefetchBatchBytes ?? 4 * 1024 * 1024;
    const wanted = plan.chunks.filter((c) => c.compressedOffset < end);
    const started = Date.now();
    let batch: Chunk[] = [];
    let batchStart = 0;
    let failed = 0;
    // two batches in flight: the next request is already on its way when one completes
    const inFlight: Array<Promise<void>> = [];
    const flush = async (): Promise<void> => {
      if (batch.length === 0) return;
      const b = batch;
      batch = [];
      inFlight.push(
        this.loader.load(b, undefined, { priority: 'prefetch', signal: this.closing.signal }).then(
          () => undefined,
          (err: unknown) => {
            failed++;
            this.recordError(err, 'prefetch batch failed');
          },
        ),
      );
      while (inFlight.length >= 2) await inFlight.shift();
    };
    for (const c of wanted) {
      if (this.closing.signal.aborted) break;
      if (batch.length > 0 && c.compressedEnd - batchStart > batchBytes) await flush();
      if (batch.length === 0) batchStart = c.compressedOffset;
      batch.push(c);
    }
    if (!this.closing.signal.aborted) await flush();
    await Promise.all(inFlight);
    if (this.closing.signal.aborted) return;
    this.prefetchDone = true;
    if (wanted.length > 0) {
      this.logger.debug({ chunks: wanted.length, end, failed, ms: Date.now() - started }, 'prefetch done');
    }
  }

  private async runBackground(plan: LayerPlan): Promise<void> {
    const passes = this.opts.maxBackgroundPasses ?? 3;
    const units = planUnits(plan, this.index.blobSize, this.opts.backgroundUnitBytes ?? 2 * 1024 * 1024);
    // A DiffID mismatch is checked once more with freshly fetched bytes before the layer is
    // declared bad: a corrupted cache or proxy on the way must not condemn a good layer.
    let recheck = false;
    for (let attempt = 1; attempt <= passes; attempt++) {
      if (this.closing.signal.aborted) return;
      const hash = this.opts.expectedDiffID !== undefined && !this.fullyVerified;
      const started = Date.now();
      try {
        const r = await backgroundPass({
          units,
          fetcher: this.fetcher,
          lastRead: () => this.lastReadAt,
          cache: this.cache,
          scheduler: this.scheduler,
          compression: this.index.compression,
          hash,
          hashInWorker: this.opts.diffIdWorker === true,
          window: Math.max(1, this.opts.backgroundWindow ?? 2),
          cancel: this.closing.signal,
          context: this.context,
          bypassCache: recheck,
          onVerified: (c) => this.markVerified(c),
          onChunkError: (err) => this.recordError(err, 'background chunk verification failed'),
        });
        if (r.chunkErrors > 0) {
          throw new StoreError(
            'E_DIGEST_MISMATCH',
            `${r.chunkErrors} chunk(s) failed verification`,
            this.context,
          );
        }
        this.backgroundDone = true;
        if (r.stream !== undefined) {
          const matched = await this.checkDiffID(r.stream, recheck);
          if (!matched && !recheck) {
            recheck = true;
            await this.forgetLocalBytes();
            attempt--; // the re-check is not a failed attempt
            continue;
          }
        }
        this.logger.info(
          { ms: Date.now() - started, bytesFetched: this.bytesFetched, fullyVerified: this.fullyVerified },
          'background fetch complete',
        );
        return;
      } catch (err) {
        if (this.closing.signal.aborted) return;
        this.recordError(err, `background fetch pass ${attempt} failed`);
        // bad data (a stream that does not decompress, chunks failing verification) may come from
        // a bad local copy: the next pass fetches from the origin
        const code = asStoreError(err, 'E_IO').code;
        if (code === 'E_DECOMPRESS' || code === 'E_DIGEST_MISMATCH') {
          recheck = true;
          await this.forgetLocalBytes();
        }
        if (attempt < passes)
          await sleep((this.opts.retryDelayMs ?? 30_000) * attempt, this.closing.signal).catch(
            () => undefined,
          );
      }
    }
  }

  /**
   * Compare the stream with the config's diff_id. A match is remembered (and persisted); a
   * mismatch marks the layer bad only when `final` (after the fresh re-check pass).
   */
  private async checkDiffID(stream: { digest: string; size: number }, final: boolean): Promise<boolean> {
    const expected = this.opts.expectedDiffID!;
    if (stream.digest === expected) {
      this.fullyVerified = true;
      this.uncompressedSize = stream.size;
      this.releaseLocalBytes();
      if (this.opts.stateDir !== undefined) {
        await saveLayerState(this.opts.stateDir, {
          layerKey: this.layerKey,
          diffID: expected,
          fullyVerified: true,
          verifiedAt: new Date().toISOString(),
          uncompressedSize: stream.size,
        }).then(
          () => layerStateWriteFaults.succeeded(this.logger),
          (err: unknown) => {
            // one warning per condition store-wide (a full disk fails every layer's state file)
            const e = asStoreError(err, 'E_IO', this.context);
            this.lastError = `${e.code}: ${e.message}`;
            layerStateWriteFaults.failed(err, this.logger, { layer: this.layerKey });
          },
        );
      }
      return true;
    }
    const context = { ...this.context, expected, actual: stream.digest, uncompressedSize: stream.size };
    if (!final) {
      const error = new StoreError(
        'E_DIGEST_MISMATCH',
        `layer stream does not match the diff_id (expected ${expected}, got ${stream.digest}); re-checking with freshly fetched bytes`,
        context,
      );
      this.lastError = `${error.code}: ${error.message}`;
      this.logger.warn({ err: error }, 'DiffID mismatch; re-checking');
      return false;
    }
    const error = new StoreError(
      'E_LAYER_BAD',
      `layer content does not match the image config diff_id: expected ${expected}, got ${stream.digest}`,
      context,
    );
    this.lastError = `${error.code}: ${error.message}`;
    this.badError = error;
    this.logger.error({ err: this.badError }, 'layer marked bad');
    return false;
  }
}
