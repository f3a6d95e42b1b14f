import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../../src/cache/index.js';
import { FetchScheduler, LazyLayer, type BlobSource, type LazyLayerOptions } from '../../src/layer/index.js';
import type { Fixture } from './layer-fixture.js';

/** The per-test set-up of the lazy-layer unit tests: a chunk cache on a temp root, layers on fixtures. */

/** A fresh chunk cache (no free-space floor) on a new temp directory named `prefix`*. */
export async function openTempCache(prefix: string): Promise<{ root: string; cache: ChunkCache }> {
  const root = await mkdtemp(join(tmpdir(), prefix));
  return { root, cache: await ChunkCache.open({ root, minFreeBytes: 0 }) };
}

/** Close `layers` (emptying the list), then the cache, then remove its root. */
export async function closeTempCache(layers: LazyLayer[], cache: ChunkCache, root: string): Promise<void> {
  for (const l of layers.splice(0)) await l.close();
  await cache.close();
  await rm(root, { recursive: true, force: true });
}

/**
 * A LazyLayer on `fx` with the unit-test defaults: a fixed layer key, no scheduler quiet time and
 * no background fetch (the test drives every fetch); `extra` overrides any of them.
 */
export function fixtureLayer(
  fx: Fixture,
  source: BlobSource,
  cache: ChunkCache,
  extra: Partial<LazyLayerOptions> = {},
): LazyLayer {
  return new LazyLayer({
    index: fx.index,
    source,
    cache,
    layerKey: 'sha256:' + 'ab'.repeat(32),
    scheduler: new FetchScheduler({ quietMs: 0 }),
    backgroundFetch: false,
    ...extra,
  });
}

/** The tree node of `path` in the fixture (throws if there is none). */
export function node(fx: Fixture, path: string) {
  const n = fx.nodes.get(path);
  if (n === undefined) throw new Error(`no ${path}`);
  return n;
}
