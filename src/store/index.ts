/**
 * The Additional Layer Store. Public API for the CLI/lifecycle code:
 *
 * - `createLayerStore(opts: LayerStoreOptions): LayerStore`
 *   - `store.status(): LayerStatus[]` — every (ref, digest) remembered: lazy or not and why, bytes
 *     fetched, percent, verified, last error, use count.
 *   - `store.counts(): { names, layers, refcounts }` — what the store holds in memory (bounded by
 *     `maxNames`, `maxIdleLayers` + layers in use, and `idleTtlMs`).
 *   - `store.addCredentials(map): number` — helper-channel credentials, passed to `opts.credentials`.
 *   - `store.close(): Promise<void>` — stops background fetches (after unmounting).
 * - `mountStore(mountpoint, store, { allowOther?, debug?, logger? }): Promise<StoreMount>` —
 *   `unmount(): Promise<void>`.
 * - `clearStaleMount(path): Promise<'none' | 'cleared' | 'live'>`, `isMountpoint(path)`,
 *   `unmountPath(path)`.
 */
import { mkdir } from 'node:fs/promises';
import type { BlobStore } from '../cache/blob-store.js';
import type { ChunkCache } from '../cache/chunk-cache.js';
import { mountVirtualFs } from '../fs/fuse-adapter.js';
import { DEFAULT_READ_AHEAD, fitToMemory, type ReadAheadPolicy } from '../layer/read-ahead.js';
import { clearStaleMount } from '../fs/mount-util.js';
import { RegistryClient } from '../registry/client.js';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { defaultOpenLayer, lazyLayerFactory, type LayerTuning } from './default-deps.js';
import type { AccessLog } from './access-log.js';
import type { CreateLayerFn, OpenLayerFn, StoreRegistry } from './deps.js';
import { DEFAULT_DEADLINES, LayerStore } from './layer-store.js';
import { storeRegistryFrom } from './registry-adapter.js';
import type { StoreDeadlines } from './store-fs.js';

export { LayerStore, DEFAULT_DEADLINES, type LayerStatus, type CoreStoreOptions } from './layer-store.js';
export type { StoreDeadlines } from './store-fs.js';
export type {
  StoreRegistry,
  LayerMatch,
  OpenLayerFn,
  CreateLayerFn,
  LazyLayerLike,
  LazyLayerState,
} from './deps.js';
export type { LayerTuning } from './default-deps.js';
export {
  AccessLog,
  type AccessLine,
  type AccessLogOptions,
  type AccessLogStats,
  type AccessSink,
  type AccessTarget,
} from './access-log.js';
export { clearStaleMount, isMountpoint, unmountPath } from '../fs/mount-util.js';

export interface LayerStoreOptions {
  /** State root (`--root`, default /var/lib/stargz-store); records go to `<root>/metadata`. */
  root: string;
  /** The registry client (or any StoreRegistry, e.g. a test double). */
  registry: RegistryClient | StoreRegistry;
  /** Chunk cache shared by all layers (required unless `createLayer` is given). */
  cache?: ChunkCache;
  /** Local copies of compressed blobs until their layers are verified (restart-resume); optional. */
  blobs?: BlobStore;
  /** Where helper-channel credentials go (the MemoryCredentialProvider given to the registry client). */
  credentials?: { addCredentials(map: unknown): number };
  logger?: Logger;
  /**
   * lookupMs: diff/info/blob resolution budget; readMs: one read; syntheticMs: I/O-free nodes;
   * fuseMs: hard limit of any other FUSE operation (default max(lookupMs, readMs) + 5 s).
   */
  deadlines?: Partial<StoreDeadlines>;
  /** How long "not lazily servable" answers are remembered (default 60 s; never for saved names). */
  negativeTtlMs?: number;
  /** An unused layer (no use count, no open file) is closed after this long idle (default 120 s). */
  idleTtlMs?: number;
  /** At most this many unused layers stay open (default 32). */
  maxIdleLayers?: number;
  /** Names remembered beyond the ones in use or resolving (default 10 000). */
  maxNames?: number;
  /** Cap on one background resolution (default max(60 s, 2 x lookupMs)). */
  resolveTimeoutMs?: number;
  /** Start prefetch + background fetch when a layer resolves (default true). */
  startLayers?: boolean;
  /** LazyLayer tuning: prefetch/background sizes, stateDir, per-read deadline ... */
  layer?: LayerTuning;
  /** Record which diff files clients open (`[debug] record_accesses`); closed by `store.close()`. */
  accessLog?: AccessLog;
  /** Sequential read-ahead per open file (default on, src/layer/read-ahead.ts); false: off. */
  readAhead?: Partial<ReadAheadPolicy> | false;
  /** Test seams. */
  openLayer?: OpenLayerFn;
  createLayer?: CreateLayerFn;
}

/** Build the store (no mount yet). */
export function createLayerStore(opts: LayerStoreOptions): LayerStore {
  const registry = opts.registry instanceof RegistryClient ? storeRegistryFrom(opts.registry) : opts.registry;
  let createLayer = opts.createLayer;
  if (!createLayer) {
    if (!opts.cache) throw new StoreError('E_CONFIG', 'createLayerStore needs a chunk cache');
    // one read budget: the layer's own deadline is the store's readMs (below the FUSE limit)
    createLayer = lazyLayerFactory(
      opts.cache,
      {
        deadlineMs: opts.deadlines?.readMs ?? DEFAULT_DEADLINES.readMs,
        ...opts.layer,
      },
      opts.blobs,
    );
  }
  const core: ConstructorParameters<typeof LayerStore>[0] = {
    root: opts.root,
    registry,
    openLayer: opts.openLayer ?? defaultOpenLayer,
    createLayer,
  };
  if (opts.credentials) core.credentials = opts.credentials;
  if (opts.logger) core.logger = opts.logger;
  if (opts.deadlines) core.deadlines = opts.deadlines;
  if (opts.negativeTtlMs !== undefined) core.negativeTtlMs = opts.negativeTtlMs;
  if (opts.idleTtlMs !== undefined) core.idleTtlMs = opts.idleTtlMs;
  if (opts.maxIdleLayers !== undefined) core.maxIdleLayers = opts.maxIdleLayers;
  if (opts.maxNames !== undefined) core.maxNames = opts.maxNames;
  if (opts.resolveTimeoutMs !== undefined) core.resolveTimeoutMs = opts.resolveTimeoutMs;
  if (opts.startLayers !== undefined) core.startLayers = opts.startLayers;
  if (opts.accessLog) core.accessLog = opts.accessLog;
  if (opts.readAhead !== undefined) core.readAhead = opts.readAhead;
  else if (opts.cache) core.readAhead = fitToMemory(DEFAULT_READ_AHEAD, opts.cache.memoryLimit);
  return new LayerStore(core);
}

export interface MountStoreOptions {
  allowOther?: boolean;
  debug?: boolean;
  logger?: Logger;
}

export interface StoreMount {
  readonly mountpoint: string;
  unmount(): Promise<void>;
}

/**
 * Mount `store` at `mountpoint` (created if missing). A dead mount left by a crashed store is
 * cleared first; a live one is an error (another store is serving there).
 */
export async function mountStore(
  mountpoint: string,
  store: LayerStore,
  opts: MountStoreOptions = {},
): Promise<StoreMount> {
  const log = opts.logger ?? silentLogger;
  const stale = await clearStaleMount(mountpoint);
  if (stale === 'cleared') log.warn({ mountpoint }, 'cleared a stale FUSE mount left by a previous store');
  if (stale === 'live') {
    throw new StoreError('E_IO', `${mountpoint} is already a mounted file system`, { path: mountpoint });
  }
  await mkdir(mountpoint, { recursive: true, mode: 0o755 });
  const m = await mountVirtualFs(mountpoint, store.vfs, {
    allowOther: opts.allowOther ?? true,
    debug: opts.debug ?? false,
    logger: log,
  });
  return { mountpoint: m.mountpoint, unmount: () => m.unmount() };
}
