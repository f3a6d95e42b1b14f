import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes, randomInt } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import type { OpContext } from '../../src/fs/vfs.js';
import { createLayerStore, type LayerStore } from '../../src/store/index.js';
import { defaultOpenLayer, lazyLayerFactory } from '../../src/store/default-deps.js';
import { assembleImage, buildTestLayer, FakeRegistry, makeTar, type BuiltLayer } from '../helpers/store.js';

const KiB = 1024;
const b64 = (s: string) => Buffer.from(s).toString('base64');
const ctx = (): OpContext => ({ signal: new AbortController().signal });

/** A layer with small chunks so a 1 MiB file has dozens of chunks (and gzip members / zstd frames). */
const smallChunkLayer = (tar: Buffer, format: 'estargz' | 'zstd:chunked'): Promise<BuiltLayer> =>
  buildTestLayer(tar, format, undefined, 32 * KiB);

describe.each(['estargz', 'zstd:chunked'] as const)('store VirtualFs with read-ahead (%s)', (format) => {
  let root: string;
  let cache: ChunkCache;
  let registry: FakeRegistry;
  let store: LayerStore;
  let layer: BuiltLayer;
  const model = randomBytes(1024 * KiB + 333);
  const REF = '127.0.0.1:5000/test/model:ra';

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-storefs-ra-'));
    cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const tar = await makeTar([
      { name: 'a.txt', content: 'a' },
      { name: 'models/', type: 'directory' },
      { name: 'models/shard.bin', content: model },
      { name: 'b.txt', content: 'bb' },
    ]);
    layer = await smallChunkLayer(tar, format);
    registry = new FakeRegistry();
    registry.set(REF, assembleImage([layer]));
    store = createLayerStore({
      root,
      registry,
      openLayer: defaultOpenLayer,
      createLayer: lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false }),
      deadlines: { lookupMs: 5000, readMs: 5000, syntheticMs: 500 },
      readAhead: {
        windows: [64 * KiB, 256 * KiB],
        triggerBytes: 32 * KiB,
        stepBytes: 64 * KiB,
        maxInflightBytes: 128 * KiB,
        slackBytes: 64 * KiB,
      },
    });
  });

  afterAll(async () => {
    await store?.close();
    await cache?.close();
    await rm(root, { recursive: true, force: true });
  });

  it('sequential reads mixed with random ones return the file bytes; each member is fetched once', async () => {
    const path = `/${b64(REF)}/${layer.descriptor.digest}/diff/models/shard.bin`;
    const f = await store.vfs.open(path, 0, ctx());
    const g = await store.vfs.open(path, 0, ctx());
    const sig = new AbortController().signal;
    const pieces: Buffer[] = [];
    // 24 KiB reads straddle the 32 KiB chunks; a second handle reads at random meanwhile
    for (let off = 0; off < model.length; off += 24 * KiB) {
      pieces.push(await f.read(off, 24 * KiB, sig));
      if (randomInt(0, 3) === 0) {
        const o = randomInt(0, model.length);
        const n = randomInt(1, 80 * KiB);
        expect((await g.read(o, n, sig)).equals(model.subarray(o, o + n)), `${o}+${n}`).toBe(true);
      }
    }
    expect(Buffer.concat(pieces).equals(model)).toBe(true);
    f.release?.();
    g.release?.();
    // read-ahead and the reads share single-flight loads and the cache: no member twice
    // (the small gaps that coalescing fetches along are the only slack)
    expect(registry.bytesRead).toBeLessThanOrEqual(Math.ceil(layer.blob.length * 1.05));
  });
});
