import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import type { OpContext } from '../../src/fs/vfs.js';
import { createLayerStore, type LayerStore } from '../../src/store/index.js';
import { defaultOpenLayer, lazyLayerFactory } from '../../src/store/default-deps.js';
import type { CreateLayerFn } from '../../src/store/deps.js';
import {
  assembleImage,
  buildTestLayer,
  decompressBlob,
  edgeCaseTar,
  FakeRegistry,
  makeTar,
  sha256,
  type BuiltLayer,
} from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const ctx = (): OpContext => ({ signal: new AbortController().signal });
const UNCOMPRESSED = 'io.containers.estargz.uncompressed-size';

/**
 * The persisted record of a name, located independently of the store code (sha256 of "ref\ndigest"),
 * once the store's record writes (which follow its answers) have landed.
 */
async function savedRecord(
  s: LayerStore,
  root: string,
  ref: string,
  digest: string,
): Promise<Record<string, unknown>> {
  await s.recordsSaved();
  const key = createHash('sha256').update(`${ref}\n${digest}`).digest('hex');
  return JSON.parse(await readFile(join(root, 'metadata', 'layers', `${key}.json`), 'utf8')) as Record<
    string,
    unknown
  >;
}

function withoutAnnotation(l: BuiltLayer, key: string): BuiltLayer {
  const annotations = { ...l.descriptor.annotations };
  delete annotations[key];
  return { ...l, descriptor: { ...l.descriptor, annotations } };
}

/** Finding 5: the OLD `info` diff-size is exact where the layer allows it. */
describe('OLD info diff-size', () => {
  let root: string;
  let cache: ChunkCache;
  let registry: FakeRegistry;
  const stores: LayerStore[] = [];
  const open = (createLayer?: CreateLayerFn) => {
    const s = createLayerStore({
      root,
      registry,
      openLayer: defaultOpenLayer,
      createLayer: createLayer ?? lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false }),
      deadlines: { lookupMs: 5000, readMs: 5000, syntheticMs: 1000 },
    });
    stores.push(s);
    return s;
  };
  const info = async (s: LayerStore, ref: string, digest: string) => {
    const f = await s.vfs.open(`/${b64(ref)}/${digest}/info`, 0, ctx());
    return JSON.parse((await f.read(0, 4096, new AbortController().signal)).toString()) as Record<
      string,
      unknown
    >;
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-diffsize-'));
    cache = await ChunkCache.open({ root });
    registry = new FakeRegistry();
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await cache.close();
    await rm(root, { recursive: true, force: true });
  });

  it('current zstd:chunked: exact, from the tar-split (checked against the TOC)', async () => {
    const l = await buildTestLayer(await edgeCaseTar(), 'zstd:chunked');
    expect(l.descriptor.annotations[UNCOMPRESSED]).toBeUndefined();
    const ref = '127.0.0.1:5000/size/zstd:1';
    registry.set(ref, assembleImage([l]));
    const s = open();
    const real = (await decompressBlob(l.blob, true)).length;
    expect((await info(s, ref, l.descriptor.digest))['diff-size']).toBe(real);
    expect(await savedRecord(s, root, ref, l.descriptor.digest)).toMatchObject({
      diffSize: real,
      diffSizeSource: 'tar-split',
    });
  });

  it('a tar-split that does not match the TOC is not used (estimate instead)', async () => {
    const good = await buildTestLayer(await makeTar([{ name: 'a', content: 'hello\n' }]), 'zstd:chunked');
    const pos = good.descriptor.annotations['io.github.containers.zstd-chunked.tarsplit-position'];
    expect(pos).toBeDefined();
    const [off, len] = pos!.split(':').map(Number) as [number, number];
    const blob = Buffer.from(good.blob);
    blob[off + Math.floor(len / 2)]! ^= 0xff;
    const bad: BuiltLayer = {
      ...good,
      blob,
      descriptor: { ...good.descriptor, digest: sha256(blob), size: blob.length },
    };
    const ref = '127.0.0.1:5000/size/zstd:tampered';
    registry.set(ref, assembleImage([bad]));
    const s = open();
    // still served (the data frames are intact), with the TOC estimate
    expect(typeof (await info(s, ref, bad.descriptor.digest))['diff-size']).toBe('number');
    expect((await savedRecord(s, root, ref, bad.descriptor.digest)).diffSizeSource).toBe('toc-estimate');
  });

  it('an estimate is replaced in the record by the size the engine measured (served after a restart)', async () => {
    const l = withoutAnnotation(
      await buildTestLayer(await makeTar([{ name: 'b', content: 'bee\n' }]), 'estargz'),
      UNCOMPRESSED,
    );
    const ref = '127.0.0.1:5000/size/esgz:measured';
    registry.set(ref, assembleImage([l]));
    const engine: { measured?: number } = {};
    const inner = lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false });
    const createLayer: CreateLayerFn = (args) => {
      const layer = inner(args);
      return {
        read: (...a) => layer.read(...a),
        close: () => layer.close(),
        state: () =>
          engine.measured === undefined
            ? layer.state()
            : { ...layer.state(), uncompressedSize: engine.measured },
      };
    };
    const s = open(createLayer);
    const d = l.descriptor.digest;
    const first = await info(s, ref, d);
    expect((await savedRecord(s, root, ref, d)).diffSizeSource).toBe('toc-estimate');
    // the engine finished its full pass: it now knows the DiffID stream length
    const measured = first['diff-size'] === 123_456 ? 654_321 : 123_456;
    engine.measured = measured;
    // the estimate is re-checked at most once a second: move the wall clock instead of sleeping
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.now() + 1100);
      // this name's info keeps its bytes (its size is in the kernel's attribute cache) ...
      expect(await info(s, ref, d)).toEqual(first);
    } finally {
      vi.useRealTimers();
    }
    // ... the record gets the measured size (written asynchronously), and a restarted store
    // (registry down) serves it
    await vi.waitFor(async () =>
      expect(await savedRecord(s, root, ref, d)).toMatchObject({
        diffSize: measured,
        diffSizeSource: 'measured',
      }),
    );
    registry.down = true;
    try {
      const s2 = open(createLayer);
      expect((await info(s2, ref, d))['diff-size']).toBe(measured);
    } finally {
      registry.down = false;
    }
  });
});
