import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { RegistryClient } from '../../src/registry/index.js';
import { startControlSocket, type ControlServer } from '../../src/store/control-socket.js';
import {
  createLayerStore,
  mountStore,
  type CreateLayerStoreOptions,
  type LayerStore,
  type StoreMount,
} from '../../src/store/index.js';
import { createPinManager } from '../../src/store/pins-deps.js';
import type { PinManager } from '../../src/store/pins.js';
import type { Logger } from '../../src/util/logger.js';

/** A real store (registry client, chunk cache, layer store) mounted with FUSE, as tests run it. */
export interface MountedStore {
  store: LayerStore;
  mount: StoreMount;
  cache: ChunkCache;
  client: RegistryClient;
  /** With `controlSocket`: pins served through the control socket. */
  pins?: PinManager;
  control?: ControlServer;
  /** Unmount and close everything, in order (control, pins, mount, store, cache, client). */
  stop(): Promise<void>;
}

export interface MountedStoreOptions {
  root: string;
  mountpoint: string;
  /** Registry request timeout (ms). Default 3000. */
  requestTimeoutMs?: number;
  deadlines?: CreateLayerStoreOptions['deadlines'];
  layer?: CreateLayerStoreOptions['layer'];
  /** Also start a pin manager and the control socket at this path. */
  controlSocket?: string;
  /** Logger for the store and the FUSE adapter (default silent). */
  logger?: Logger;
}

/** Start a store on `root` and mount it at `mountpoint` (few retries: tests fail fast). */
export async function startMountedStore(o: MountedStoreOptions): Promise<MountedStore> {
  const cache = await ChunkCache.open({ root: o.root, minFreeBytes: 0 });
  const client = new RegistryClient({
    retry: { maxRetries: 1, minWaitMs: 10, maxWaitMs: 50 },
    requestTimeoutMs: o.requestTimeoutMs ?? 3000,
  });
  const store = createLayerStore({
    root: o.root,
    registry: client,
    cache,
    ...(o.deadlines ? { deadlines: o.deadlines } : {}),
    ...(o.layer ? { layer: o.layer } : {}),
    ...(o.logger ? { logger: o.logger } : {}),
  });
  let pins: PinManager | undefined;
  let control: ControlServer | undefined;
  if (o.controlSocket !== undefined) {
    pins = createPinManager({ root: o.root, registry: client, store });
    await pins.load();
  }
  const mount = await mountStore(o.mountpoint, store, {
    allowOther: true,
    ...(o.logger ? { logger: o.logger } : {}),
  });
  if (o.controlSocket !== undefined && pins !== undefined) {
    control = await startControlSocket(o.controlSocket, {
      addCredentials: () => undefined,
      status: () => ({}),
      pins,
    });
  }
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    await control?.close();
    await pins?.close();
    await mount.unmount();
    await store.close();
    await cache.close();
    await client.close();
  };
  return { store, mount, cache, client, stop, ...(pins ? { pins } : {}), ...(control ? { control } : {}) };
}

/**
 * A store a test starts, stops and starts again on the same root: `stop()` is a no-op when
 * nothing runs, so suites can call it in `afterAll` and between restarts alike.
 */
export class StoreSlot {
  current: MountedStore | undefined;

  async start(o: MountedStoreOptions): Promise<MountedStore> {
    // A test that timed out leaves its store mounted; the next test's mount would then fail with
    // "Mountpoint in use" and report that instead of its own result. So the old store goes first.
    await this.stop();
    this.current = await startMountedStore(o);
    return this.current;
  }

  async stop(): Promise<void> {
    const r = this.current;
    this.current = undefined;
    await r?.stop();
  }
}
