/**
 * A layer whose TOC has more entries than `max_toc_entries` is refused early: the lookup answers
 * ENOENT (the client pulls the layer normally) and the store keeps serving other layers.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { readLayerToc } from '../../src/format/open-layer.js';
import { errnoFor } from '../../src/fs/errno.js';
import type { OpContext } from '../../src/fs/vfs.js';
import { createLayerStore, type LayerStore } from '../../src/store/index.js';
import { lazyLayerFactory } from '../../src/store/default-deps.js';
import type { OpenLayerFn } from '../../src/store/deps.js';
import { assembleImage, buildTestLayer, FakeRegistry, makeTar } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const ctx = (): OpContext => ({ signal: new AbortController().signal });

describe('entry cap at the store', () => {
  let root: string;
  let cache: ChunkCache;
  let store: LayerStore;
  const registry = new FakeRegistry();
  const refused: string[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-toccap-'));
    cache = await ChunkCache.open({ root });
    // what serve-command wires from `max_toc_entries`
    const openLayer: OpenLayerFn = async (reader, o) => {
      try {
        return await readLayerToc(reader, { ...o, maxEntries: 10 });
      } catch (err) {
        refused.push((err as { code?: string }).code ?? '?');
        throw err;
      }
    };
    store = createLayerStore({
      root,
      registry,
      openLayer,
      createLayer: lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false }),
      deadlines: { lookupMs: 10_000, readMs: 10_000, syntheticMs: 1000 },
    });
  });
  afterAll(async () => {
    await store.close();
    await cache.close();
    await rm(root, { recursive: true, force: true });
  });

  for (const format of ['estargz', 'zstd:chunked'] as const) {
    it(`${format}: over the cap -> ENOENT; under it -> served`, async () => {
      const many = Array.from({ length: 30 }, (_, i) => ({ name: `f${i}`, content: `${i}\n` }));
      const big = await buildTestLayer(await makeTar(many), format);
      const small = await buildTestLayer(await makeTar([{ name: 'a', content: 'hello\n' }]), format);
      const ref = `127.0.0.1:5000/cap/${format.replace(':', '-')}:1`;
      registry.set(ref, assembleImage([big, small]));
      refused.length = 0;
      const err = await store.vfs.open(`/${b64(ref)}/${big.descriptor.digest}/info`, 0, ctx()).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: 'E_NOT_FOUND' });
      expect(errnoFor(err)).toBe('ENOENT'); // what the FUSE edge answers
      expect(refused).toEqual(['E_TOO_MANY_ENTRIES']);
      const f = await store.vfs.open(`/${b64(ref)}/${small.descriptor.digest}/diff/a`, 0, ctx());
      expect((await f.read(0, 100, new AbortController().signal)).toString()).toBe('hello\n');
    });
  }
});
