import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { errnoFor } from '../../src/fs/errno.js';
import { S_IFDIR, S_IFMT, type OpContext } from '../../src/fs/vfs.js';
import { createLayerStore, type LayerStore } from '../../src/store/index.js';
import { defaultOpenLayer, lazyLayerFactory } from '../../src/store/default-deps.js';
import type { OpenLayerFn } from '../../src/store/deps.js';
import { isStoreError } from '../../src/util/errors.js';
import {
  assembleImage,
  buildTestLayer,
  edgeCaseTar,
  FakeRegistry,
  sha256,
  type BuiltImage,
} from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const ctx = (): OpContext => ({ signal: new AbortController().signal });
const sig = () => new AbortController().signal;
async function errno(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return errnoFor(err);
  }
  return 'OK';
}

/** The edge-case layer's big.bin, computed here (not read back from any code under test). */
function bigBin(): Buffer {
  const big = Buffer.alloc(5 * 1024 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 13)) & 0xff;
  return big;
}

/**
 * Finding 1: a restarted store serves layers it resolved before from disk (record + verified TOC +
 * chunk cache) without the registry; only missing chunks need it, and failures of names with a
 * saved record are never negative-cached.
 */
describe('store restart without the registry', () => {
  let root: string;
  let registry: FakeRegistry;
  let esgz: BuiltImage;
  let zstd: BuiltImage;
  const REF = '127.0.0.1:5000/test/restart:esgz';
  const ZREF = '127.0.0.1:5000/test/restart:zstd';
  const READ_MS = 800;
  let tocParses = 0;
  const countingOpen: OpenLayerFn = async (reader, opts) => {
    tocParses++;
    return await defaultOpenLayer(reader, opts);
  };

  const open = async (): Promise<{ store: LayerStore; cache: ChunkCache }> => {
    const cache = await ChunkCache.open({ root });
    const store = createLayerStore({
      root,
      registry,
      openLayer: countingOpen,
      createLayer: lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false, deadlineMs: READ_MS }),
      deadlines: { lookupMs: 1500, readMs: READ_MS, syntheticMs: 500 },
      negativeTtlMs: 600_000,
    });
    return { store, cache };
  };
  const close = async (s: { store: LayerStore; cache: ChunkCache }) => {
    await s.store.close();
    await s.cache.close();
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-restart-'));
    const tar = await edgeCaseTar();
    esgz = assembleImage([await buildTestLayer(tar, 'estargz')]);
    zstd = assembleImage([await buildTestLayer(tar, 'zstd:chunked')]);
    registry = new FakeRegistry();
    registry.set(REF, esgz);
    registry.set(ZREF, zstd);
  });

  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('serves cached files with the registry down, EIO for missing chunks, and recovers when it is back', async () => {
    const d = esgz.layers[0]!.descriptor.digest;
    const base = `/${b64(REF)}/${d}`;
    // first life: resolve, read one file (its chunks land in the disk cache)
    const first = await open();
    const info1 = await (await first.store.vfs.open(`${base}/info`, 0, ctx())).read(0, 4096, sig());
    const f = await first.store.vfs.open(`${base}/diff/foo/bar.txt`, 0, ctx());
    expect((await f.read(0, 100, sig())).toString()).toBe('bar content\n');
    await close(first);

    // registry gone; the store restarts
    registry.down = true;
    const calls = { images: registry.imageCalls, blobs: registry.blobOpens };
    const second = await open();
    try {
      const fs = second.store.vfs;
      expect((await fs.getattr(`${base}/diff`, ctx())).mode & S_IFMT).toBe(S_IFDIR);
      expect((await fs.readdir(`${base}/diff`, ctx())).map((e) => e.name)).toContain('big.bin');
      const bar = await fs.open(`${base}/diff/foo/bar.txt`, 0, ctx());
      expect((await bar.read(0, 100, sig())).toString()).toBe('bar content\n');
      const info2 = await (await fs.open(`${base}/info`, 0, ctx())).read(0, 4096, sig());
      expect(info2.equals(info1)).toBe(true);
      // not one request: the TOC came from disk, the content from the chunk cache
      expect(registry.imageCalls).toBe(calls.images);
      expect(registry.blobOpens).toBe(calls.blobs);

      // content that was never fetched needs the registry: EIO with the registry's own error
      // (it fails fast, not by running into the read deadline)
      const big = await fs.open(`${base}/diff/big.bin`, 0, ctx());
      let err: unknown;
      try {
        await big.read(0, 4096, sig());
      } catch (e) {
        err = e;
      }
      expect(errnoFor(err)).toBe('EIO');
      expect(err).toMatchObject({ code: 'E_REGISTRY_NETWORK' });

      // the registry is back: the same open file and new lookups work, nothing stuck
      registry.down = false;
      const want = bigBin();
      expect((await big.read(0, 4096, sig())).equals(want.subarray(0, 4096))).toBe(true);
      const again = await fs.open(`${base}/diff/big.bin`, 0, ctx());
      expect((await again.read(want.length - 100, 100, sig())).equals(want.subarray(want.length - 100))).toBe(
        true,
      );
    } finally {
      registry.down = false;
      await close(second);
    }
  });

  it('a saved name whose resolution fails while the registry is down is not negative-cached', async () => {
    const d = zstd.layers[0]!.descriptor.digest;
    const base = `/${b64(ZREF)}/${d}`;
    const first = await open();
    expect((await first.store.vfs.getattr(`${base}/diff/foo/bar.txt`, ctx())).size).toBe(12);
    await close(first);
    // without its saved TOC the layer needs the registry again
    const tocs = join(root, 'metadata', 'tocs');
    const hex = d.slice('sha256:'.length);
    const files = await readdir(tocs);
    expect(files).toContain(`${hex}.tail`);
    await rm(join(tocs, `${hex}.tail`));

    registry.down = true;
    const second = await open();
    try {
      const fs = second.store.vfs;
      expect(await errno(fs.getattr(`${base}/diff/foo/bar.txt`, ctx()))).toBe('EIO');
      const st = second.store.status().find((s) => s.digest === d)!;
      expect(st.lazy).toBe(false);
      expect(st.lastError).toMatch(/E_REGISTRY_NETWORK/);
      // back within the (long) negative TTL: answered at once, from the registry
      registry.down = false;
      expect((await fs.getattr(`${base}/diff/foo/bar.txt`, ctx())).size).toBe(12);
      expect(second.store.status().find((s) => s.digest === d)!.lazy).toBe(true);
    } finally {
      registry.down = false;
      await close(second);
    }
    // and the TOC is saved again (by the time the store stopped)
    expect(await readdir(tocs)).toContain(`${hex}.tail`);
  });

  it('a damaged saved TOC is not trusted: it is verified, then re-read from the registry', async () => {
    const { writeFile, readFile } = await import('node:fs/promises');
    const d = esgz.layers[0]!.descriptor.digest;
    const path = join(root, 'metadata', 'tocs', `${d.slice('sha256:'.length)}.tail`);
    const saved = await readFile(path);
    // flip one byte in the middle of the TOC bytes (after the header line)
    const damaged = Buffer.from(saved);
    const at = damaged.indexOf(0x0a) + 1 + Math.floor((damaged.length - damaged.indexOf(0x0a)) / 2);
    damaged[at] = damaged[at]! ^ 0xff;
    await writeFile(path, damaged);
    const s = await open();
    try {
      const blobs = registry.blobOpens;
      const bar = await s.store.vfs.open(`/${b64(REF)}/${d}/diff/foo/bar.txt`, 0, ctx());
      expect(sha256(await bar.read(0, 100, sig()))).toBe(sha256('bar content\n'));
      expect(registry.blobOpens).toBe(blobs + 1);
    } finally {
      await close(s);
    }
    // the good TOC replaced the damaged file (saved after the lookup's answer; closing waits for it)
    expect((await readFile(path)).equals(saved)).toBe(true);
  });

  it('the registry blob is not even opened when nothing needs it', async () => {
    const s = await open();
    try {
      const blobs = registry.blobOpens;
      const parses = tocParses;
      const d = esgz.layers[0]!.descriptor.digest;
      const r = await s.store.vfs.getattr(`/${b64(REF)}/${d}/blob`, ctx());
      expect(r.size).toBe(esgz.layers[0]!.blob.length);
      expect(tocParses).toBe(parses + 1);
      expect(registry.blobOpens).toBe(blobs);
    } catch (err) {
      if (isStoreError(err)) throw new Error(`${err.code}: ${err.message}`);
      throw err;
    } finally {
      await close(s);
    }
  });
});
