import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import type { OpContext } from '../../src/fs/vfs.js';
import { tocAnnotation } from '../../src/registry/manifest.js';
import { createLayerStore, type LayerStore } from '../../src/store/index.js';
import { defaultOpenLayer, lazyLayerFactory } from '../../src/store/default-deps.js';
import type { OpenLayerFn } from '../../src/store/deps.js';
import { EagerQueue } from '../../src/store/eager.js';
import {
  assembleImage,
  buildTestLayer,
  FakeRegistry,
  makeTar,
  patchLayers,
  type BuiltImage,
} from '../helpers/store.js';
import { turns, watch } from '../helpers/promises.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const ctx = (): OpContext => ({ signal: new AbortController().signal });

/** Resolves when `n` events were counted (tests wait on events, never on time). */
class Counter {
  n = 0;
  private waits: Array<{ at: number; resolve: () => void }> = [];
  hit(): void {
    this.n++;
    this.waits = this.waits.filter((w) => (w.at <= this.n ? (w.resolve(), false) : true));
  }
  reach(at: number): Promise<void> {
    return at <= this.n ? Promise.resolve() : new Promise((resolve) => this.waits.push({ at, resolve }));
  }
}

/**
 * Issue 10 (pull phase): Podman looks the layers of an image up one at a time, base first, each under
 * a storage lock. The first lookup resolves every other layer of the manifest ahead of the client,
 * so the later lookups find their answer ready (or join the resolution in flight).
 */
describe('eager resolution of an image’s other layers', () => {
  let root: string;
  let cache: ChunkCache;
  let img: BuiltImage;
  const stores: LayerStore[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-eager-'));
    cache = await ChunkCache.open({ root: join(root, 'cache') });
    const layers = [];
    for (let i = 0; i < 3; i++) {
      layers.push(
        await buildTestLayer(await makeTar([{ name: `l${i}/f`, content: `layer ${i}\n` }]), 'estargz'),
      );
    }
    img = assembleImage(layers);
  });

  afterAll(async () => {
    for (const s of stores) await s.close();
    await cache.close();
    await rm(root, { recursive: true, force: true });
  });

  /** A store on a fresh root with counters on the registry, TOC parses, layer starts and eager resolutions. */
  const open = async (
    gate?: Promise<void>,
    extra: {
      /** Runs before each TOC read (`n`: 0 for the first): may wait, may use the parse turns. */
      hook?: (n: number, opts: Parameters<OpenLayerFn>[1]) => Promise<void>;
      resolveTimeoutMs?: number;
    } = {},
  ) => {
    const registry = new FakeRegistry();
    const ref = `127.0.0.1:5000/eager/app${stores.length}:latest`;
    registry.set(ref, img);
    const parses = new Counter();
    const eagerResolved = new Counter();
    const eagerFailed = new Counter();
    const started = new Set<string>();
    const openLayer: OpenLayerFn = async (reader, opts) => {
      const n = parses.n;
      parses.hit();
      if (gate) await gate;
      await extra.hook?.(n, opts);
      return await defaultOpenLayer(reader, opts);
    };
    const inner = lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false, deadlineMs: 5000 });
    const createLayer = patchLayers(inner, (args) => ({ start: () => started.add(args.blobDigest) }));
    const logger = pino(
      { level: 'info' },
      {
        write(line: string) {
          const rec = JSON.parse(line) as { msg?: string; eager?: boolean };
          if (rec.eager === true && rec.msg === 'layer resolved: served lazily') eagerResolved.hit();
          if (rec.eager === true && rec.msg?.startsWith('layer not served lazily')) eagerFailed.hit();
        },
      },
    );
    const store = createLayerStore({
      root: await mkdtemp(join(root, 'store-')),
      registry,
      openLayer,
      createLayer,
      logger,
      deadlines: { lookupMs: 5000, readMs: 5000, syntheticMs: 1000 },
      ...(extra.resolveTimeoutMs !== undefined ? { resolveTimeoutMs: extra.resolveTimeoutMs } : {}),
    });
    stores.push(store);
    return { store, registry, ref, parses, eagerResolved, eagerFailed, started };
  };

  const blobName = (i: number) => img.layers[i]!.descriptor.digest;
  const tocName = (i: number) => tocAnnotation(img.layers[i]!.descriptor)!.value;
  /** Which layer a TOC read is for (reads start in whatever order their disk checks finish). */
  const layerOf = (opts: Parameters<OpenLayerFn>[1]) =>
    img.layers.findIndex((_, i) => tocName(i) === opts.expectedTocDigest);

  it('OLD protocol: after the base layer’s lookup the others resolve without the client, then answer with no registry or TOC work', async () => {
    const { store, registry, ref, parses, eagerResolved, started } = await open();
    await store.vfs.getattr(`/${b64(ref)}/${blobName(0)}/diff`, ctx());
    await eagerResolved.reach(2);
    expect(registry.imageCalls).toBe(1);
    expect(parses.n).toBe(3);
    // background work starts only for the layer a client asked for
    expect([...started]).toEqual([blobName(0)]);
    const blobs = registry.blobOpens;
    for (const i of [1, 2]) {
      const attr = await store.vfs.getattr(`/${b64(ref)}/${blobName(i)}/diff/l${i}/f`, ctx());
      expect(attr.size).toBe(`layer ${i}\n`.length);
    }
    expect(registry.imageCalls).toBe(1);
    expect(parses.n).toBe(3);
    expect(registry.blobOpens).toBe(blobs);
    expect(new Set(started)).toEqual(new Set([0, 1, 2].map(blobName)));
    const st = store.status().filter((s) => s.lazy);
    expect(st.map((s) => s.digest).sort()).toEqual([0, 1, 2].map(blobName).sort());
  });

  it('NEW protocol: siblings resolve under their TOC digests; the other form of a name needs no registry call', async () => {
    const { store, registry, ref, parses, eagerResolved } = await open();
    await store.vfs.getattr(`/${b64(ref)}/${tocName(0)}/diff`, ctx());
    await eagerResolved.reach(2);
    expect(store.status().filter((s) => s.lazy && s.matchedBy === 'toc').length).toBe(3);
    for (const i of [1, 2]) await store.vfs.getattr(`/${b64(ref)}/${tocName(i)}/info`, ctx());
    // an OLD-form lookup of a layer already opened: matched from the known manifest, blob shared
    await store.vfs.getattr(`/${b64(ref)}/${blobName(2)}/info`, ctx());
    expect(registry.imageCalls).toBe(1);
    expect(parses.n).toBe(3);
  });

  it('starts every layer’s TOC read while the image config is still being fetched, and reads each blob once', async () => {
    const { store, registry, ref, eagerResolved } = await open();
    let releaseConfig!: () => void;
    registry.configGate = new Promise<void>((r) => (releaseConfig = r));
    const reads = new Map<string, number>();
    const allStarted = new Promise<void>((resolve) => {
      registry.onRead = (digest) => {
        reads.set(digest, (reads.get(digest) ?? 0) + 1);
        if (reads.size === 3) resolve();
      };
    });
    const lookup = store.vfs.getattr(`/${b64(ref)}/${blobName(0)}/diff`, ctx());
    // the first reads of all three blobs are under way with the config still held back
    await allStarted;
    releaseConfig();
    await lookup;
    await eagerResolved.reach(2);
    // the TOC opens took their bytes from those reads: no blob was read twice
    expect([...reads.values()]).toEqual([1, 1, 1]);
    expect(registry.bytesRead).toBe(img.layers.reduce((n, l) => n + l.blob.length, 0));
  });

  it('a lookup of a layer being resolved ahead joins that resolution (one TOC parse per layer)', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { store, registry, ref, parses } = await open(gate);
    const first = store.vfs.getattr(`/${b64(ref)}/${blobName(0)}/diff`, ctx());
    // all three TOC reads are under way (the client's and two ahead of it), none finished
    await parses.reach(3);
    const second = store.vfs.getattr(`/${b64(ref)}/${blobName(1)}/diff`, ctx());
    release();
    await Promise.all([first, second]);
    await store.vfs.getattr(`/${b64(ref)}/${blobName(2)}/diff`, ctx());
    expect(parses.n).toBe(3);
    expect(registry.imageCalls).toBe(1);
  });

  describe('TOC parses of layers resolved ahead yield to the one the client waits for', () => {
    it('a parse ahead of the client pauses while the client’s resolution runs, and goes on when asked for or done', async () => {
      let release!: () => void;
      const clientsParse = new Promise<void>((r) => (release = r));
      const paused = new Map<number, { settled: boolean; done: Promise<void> }>();
      const { store, ref, parses } = await open(undefined, {
        hook: async (_n, opts) => {
          // the client's own TOC read (layer 0's) is held until the test lets it go
          const layer = layerOf(opts);
          if (layer === 0) return await clientsParse;
          const w = watch(opts.turns?.pause());
          paused.set(layer, w);
          await w.done;
        },
      });
      const first = store.vfs.getattr(`/${b64(ref)}/${blobName(0)}/diff`, ctx());
      await parses.reach(3);
      await turns();
      // both parses ahead of the client are held while it waits for its own
      expect([...paused.values()].map((w) => w.settled)).toEqual([false, false]);
      // the client asks for layer 1 now: that parse goes on at once, layer 2's still waits
      const second = store.vfs.getattr(`/${b64(ref)}/${blobName(1)}/diff`, ctx());
      await paused.get(1)!.done;
      await second;
      await turns();
      expect(paused.get(2)!.settled).toBe(false);
      release();
      await first;
      await paused.get(2)!.done;
      await store.vfs.getattr(`/${b64(ref)}/${blobName(2)}/diff`, ctx());
      expect(parses.n).toBe(3);
    });

    it('a resolution ahead of the client that times out is not remembered as failed: the client’s lookup resolves it', async () => {
      let hang = true;
      const { store, ref, parses, eagerFailed } = await open(undefined, {
        resolveTimeoutMs: 200,
        // the resolutions ahead (layers 1, 2) never finish their first TOC read
        hook: async (_n, opts) => {
          // like a read from a registry that never answers: only the resolution's signal ends it
          if (layerOf(opts) > 0 && hang) {
            await new Promise<void>((_, reject) =>
              opts.signal?.addEventListener('abort', () => reject(new Error('aborted')), { once: true }),
            );
          }
        },
      });
      await store.vfs.getattr(`/${b64(ref)}/${blobName(0)}/diff`, ctx());
      // both held resolutions fail at their deadline; then the client asks for them
      await eagerFailed.reach(2);
      hang = false;
      for (const i of [1, 2]) {
        const attr = await store.vfs.getattr(`/${b64(ref)}/${blobName(i)}/diff/l${i}/f`, ctx());
        expect(attr.size).toBe(`layer ${i}\n`.length);
      }
      expect(parses.n).toBe(5);
    });
  });
});

describe('EagerQueue', () => {
  it('runs at most `concurrency` jobs at once, in order, skipping jobs with nothing to do', async () => {
    const q = new EagerQueue(2);
    const order: number[] = [];
    const releases: Array<() => void> = [];
    let running = 0;
    let peak = 0;
    const job = (i: number) => () => {
      if (i === 2) return undefined; // already resolved by the client: nothing to run
      order.push(i);
      running++;
      peak = Math.max(peak, running);
      return new Promise<void>((r) =>
        releases.push(() => {
          running--;
          r();
        }),
      );
    };
    for (let i = 0; i < 5; i++) q.push(job(i));
    expect(order).toEqual([0, 1]);
    const idle = q.idle();
    while (releases.length > 0) {
      releases.shift()!();
      await new Promise<void>((r) => setImmediate(r));
    }
    await idle;
    expect(order).toEqual([0, 1, 3, 4]);
    expect(peak).toBe(2);
  });
});
