import type { BlobStore, ChunkCache } from '../cache/index.js';
import type { StoreConfig } from '../store/config.js';
import type { CredentialMap } from '../store/control-socket.js';
import type { AccessLog } from '../store/index.js';
import type { PinManager } from '../store/pins.js';
import { asStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import {
  chunkCacheOptions,
  authFilePaths,
  hostsFromStoreConfig,
  layerStoreOptions,
  readRegistriesConf,
  registryClientOptions,
  schedulerOptions,
} from './config-options.js';

// Only type imports at the top: the registry (undici), cache, layer engine and FUSE store are
// loaded inside buildStore(), so `--help`, `--version` and the other commands start fast.

/** What the serve command needs from the assembled store. */
export interface BuiltStore {
  mount(mountpoint: string): Promise<{ unmount(): Promise<void> }>;
  addCredentials(map: CredentialMap): void | Promise<void>;
  /** Every layer: the ones looked up since this start and those the root knows from earlier runs. */
  status(): Promise<unknown>;
  close(): Promise<void>;
  /** Pinned image sets (resumed from <root>/pins.json at start-up). */
  pins?: PinManager;
}

/** Registry client, chunk cache and layer store, built from the config. */
export async function buildStore(config: StoreConfig, logger: Logger): Promise<BuiltStore> {
  const [
    { BlobStore, ChunkCache, chunkCacheBudget },
    { FetchScheduler },
    { defaultCredentialProviders, MemoryCredentialProvider, mergeHostsConfigs, RegistryClient },
    { AccessLog, createLayerStore, mountStore },
    { passingBytesSink },
    { createPinManager },
    { setMetricSources },
    { layerStateCounts },
    { readLayerToc },
  ] = await Promise.all([
    import('../cache/index.js'),
    import('../layer/index.js'),
    import('../registry/index.js'),
    import('../store/index.js'),
    import('../store/local-blob-binding.js'),
    import('../store/pins-deps.js'),
    import('../util/metrics.js'),
    import('../store/metrics-sources.js'),
    import('../format/open-layer.js'),
  ]);
  const hosts = mergeHostsConfigs(
    hostsFromStoreConfig(config),
    await readRegistriesConf(config.registry.registriesConf, logger),
  );
  const memory = new MemoryCredentialProvider();
  const registry = new RegistryClient({
    ...registryClientOptions(
      config,
      hosts,
      defaultCredentialProviders(memory, { paths: authFilePaths(config) }),
      logger,
    ),
    // a Range-ignoring mirror's one stream per blob fills the layer's local copy
    passingBytesSink: passingBytesSink(() => blobs),
  });
  let cache: ChunkCache | undefined;
  let blobs: BlobStore | undefined;
  let accessLog: AccessLog | undefined;
  try {
    if (config.recordAccesses !== '') accessLog = await AccessLog.toFile(config.recordAccesses, { logger });
    await (await import('../store/leftover-temps.js')).removeLeftoverTemps(config.root, logger);
    const { holdStartPins, pinnedChunksOnDisk } = await import('../store/pinned-chunks.js');
    const startPins = await pinnedChunksOnDisk(config.root, logger);
    cache = await ChunkCache.open(chunkCacheOptions(config, logger));
    // pinned chunks survive the start-up trim until their pins are held again
    const releaseStartPins = holdStartPins(cache, startPins);
    // compressed bytes kept until each layer is verified: a restart resumes, nothing is fetched twice
    blobs = await BlobStore.open({ root: config.root, budget: chunkCacheBudget(cache), logger });
    const tuning = layerStoreOptions(config);
    const store = createLayerStore({
      ...tuning,
      registry,
      cache,
      blobs,
      credentials: memory,
      logger,
      ...(accessLog ? { accessLog } : {}),
      openLayer: (reader, o) => readLayerToc(reader, { ...o, maxEntries: config.maxTocEntries }),
      layer: { ...tuning.layer, scheduler: new FetchScheduler(schedulerOptions(config)) },
    });
    const c = cache;
    const b = blobs;
    const pins = createPinManager({ root: config.root, registry, store, logger });
    // a damaged pins.json must not keep the node's store down: named in the log, pins start empty
    await pins.load().catch((err: unknown) => logger.error({ err: asStoreError(err) }, 'pins not loaded'));
    void pins.idle().finally(releaseStartPins);
    setMetricSources({
      cache: () => c.stats(),
      layers: () => layerStateCounts(store.status()),
      pins: () => pins.counts(),
    });
    return {
      pins,
      mount: (mountpoint) => mountStore(mountpoint, store, { allowOther: true, debug: config.debug, logger }),
      addCredentials: (map) => {
        store.addCredentials(map);
      },
      status: () => store.statusWithDisk(),
      close: async () => {
        await pins.close();
        await store.close();
        await b.close();
        await c.close();
        await registry.close();
      },
    };
  } catch (err) {
    await accessLog?.close();
    await blobs?.close();
    await cache?.close();
    await registry.close();
    throw err;
  }
}
