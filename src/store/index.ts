/**
 * The Additional Layer Store. Public API for the CLI/lifecycle code:
 *
 * - `createLayerStore(opts: CreateLayerStoreOptions): LayerStore`
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
import { heldBlobBytes } from './disk-status.js';
import { mkdir } from 'node:fs/promises';
import type { BlobStore } from '../cache/blob-store.js';
import type { ChunkCache } from '../cache/chunk-cache.js';
import { mountVirtualFs } from '../fs/fuse-adapter.js';
import { DEFAULT_READ_AHEAD, fitToMemory } from '../layer/read-ahead.js';
import { clearStaleMount } from '../fs/mount-util.js';
import { RegistryClient } from '../registry/client.js';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { defaultOpenLayer, lazyLayerFactory, type LayerTuning } from './default-deps.js';
import type { CreateLayerFn, OpenLayerFn, StoreRegistry } from './deps.js';
import { DEFAULT_DEADLINES, LayerStore, type LayerStoreOptions } from './layer-store.js';
import { storeRegistryFrom } from './registry-adapter.js';

export {
  LayerStore,
  DEFAULT_DEADLINES,
  type LayerStatus,
  type LayerStoreOptions,
  type CoreStoreOptions,
} from './layer-store.js';
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

/**
 * The store's options (layer-store.ts) where the registry may be the real client and layers may be
 * built from a chunk cache: `cache` + `layer` replace `createLayer`, nothing else is restated.
 */
export interface CreateLayerStoreOptions extends Omit<
  LayerStoreOptions,
  'registry' | 'openLayer' | 'createLayer'
> {
  /** The registry client (or any StoreRegistry, e.g. a test double). */
  registry: RegistryClient | StoreRegistry;
  /** Chunk cache shared by all layers (required unless `createLayer` is given). */
  cache?: ChunkCache;
  /** Local copies of compressed blobs until their layers are verified (restart-resume); optional. */
  blobs?: BlobStore;
  /** LazyLayer tuning: prefetch/background sizes, stateDir ... (read deadline: `deadlines.readMs` unless set here). */
  layer?: LayerTuning;
  /** Test seams. */
  openLayer?: OpenLayerFn;
  createLayer?: CreateLayerFn;
}

/** Build the store (no mount yet). */
export function createLayerStore(opts: CreateLayerStoreOptions): LayerStore {
  const { cache, layer, blobs, ...rest } = opts;
  const registry = opts.registry instanceof RegistryClient ? storeRegistryFrom(opts.registry) : opts.registry;
  let createLayer = opts.createLayer;
  if (!createLayer) {
    if (!cache) throw new StoreError('E_CONFIG', 'createLayerStore needs a chunk cache');
    // one read budget: the layer's own deadline is the store's readMs (below the FUSE limit)
    createLayer = lazyLayerFactory(
      cache,
      {
        deadlineMs: opts.deadlines?.readMs ?? DEFAULT_DEADLINES.readMs,
        ...layer,
      },
      blobs,
    );
  }
  // read-ahead by default, its window within the chunk cache's memory budget
  const readAhead =
    opts.readAhead ?? (cache ? fitToMemory(DEFAULT_READ_AHEAD, cache.memoryLimit) : undefined);
  return new LayerStore({
    ...rest,
    ...(layer?.stateDir !== undefined && rest.stateDir === undefined ? { stateDir: layer.stateDir } : {}),
    ...(blobs !== undefined && rest.coverage === undefined ? { coverage: heldBlobBytes(blobs) } : {}),
    registry,
    openLayer: opts.openLayer ?? defaultOpenLayer,
    createLayer,
    ...(readAhead !== undefined ? { readAhead } : {}),
  });
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
