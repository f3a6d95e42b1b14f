import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { errnoFor } from '../../src/fs/errno.js';
import type { OpContext } from '../../src/fs/vfs.js';
import type { LayerIndex, TreeNode } from '../../src/format/model.js';
import { createLayerStore, type LayerStore } from '../../src/store/index.js';
import { defaultOpenLayer, lazyLayerFactory } from '../../src/store/default-deps.js';
import type { OpenLayerFn } from '../../src/store/deps.js';
import { DiffView, utf8Compare } from '../../src/store/diff-view.js';
import { InoAllocator } from '../../src/store/ino.js';
import {
  assembleImage,
  buildTestLayer,
  edgeCaseTar,
  FakeRegistry,
  makeTar,
  patchLayers,
  type BuiltImage,
} from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const ctx = (): OpContext => ({ signal: new AbortController().signal });
const sig = () => new AbortController().signal;

/**
 * Finding 3: a long-running store keeps memory bounded however many refs and names it sees, and
 * shares one opened layer between all refs of a blob. Finding 7: reads run under the layer's own
 * deadline, below the FUSE adapter's hard limit.
 */
// a test that fails while on fake timers must not leave them to the next one
afterEach(() => {
  vi.useRealTimers();
});

describe('store memory bounds over many refs and names', () => {
  let root: string;
  let cache: ChunkCache;
  let registry: FakeRegistry;
  let img: BuiltImage;
  let tocParses = 0;
  let closes = 0;
  const stores: LayerStore[] = [];
  const countingOpen: OpenLayerFn = async (reader, opts) => {
    tocParses++;
    return await defaultOpenLayer(reader, opts);
  };
  const open = (extra: Partial<Parameters<typeof createLayerStore>[0]> = {}) => {
    const inner = lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false, deadlineMs: 5000 });
    const createLayer = patchLayers(inner, (_args, l) => ({
      close: async () => {
        closes++;
        await l.close();
      },
    }));
    const s = createLayerStore({
      root,
      registry,
      openLayer: countingOpen,
      createLayer,
      deadlines: { lookupMs: 5000, readMs: 5000, syntheticMs: 1000 },
      ...extra,
    });
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-bounds-'));
    cache = await ChunkCache.open({ root });
    img = assembleImage([await buildTestLayer(await edgeCaseTar(), 'estargz')]);
    registry = new FakeRegistry();
  });

  afterAll(async () => {
    for (const s of stores) await s.close();
    await cache.close();
    await rm(root, { recursive: true, force: true });
  });

  it('one blob shared by many tags is opened and parsed once, with one set of inode numbers', async () => {
    const store = open();
    const d = img.layers[0]!.descriptor.digest;
    const parses = tocParses;
    const blobs = registry.blobOpens;
    const inos = new Set<number>();
    for (let i = 0; i < 40; i++) {
      const ref = `127.0.0.1:5000/shared/app${i}:v${i}`;
      registry.set(ref, img);
      inos.add((await store.vfs.getattr(`/${b64(ref)}/${d}/diff/foo/bar.txt`, ctx())).ino);
    }
    expect(tocParses - parses).toBe(1);
    expect(registry.blobOpens - blobs).toBe(1);
    expect(inos.size).toBe(1);
    expect(store.counts().layers).toBe(1);
  });

  it('names, open layers and use counts stay bounded; in-use and open layers are kept', async () => {
    const store = open({ maxNames: 50, maxIdleLayers: 3, idleTtlMs: 3_600_000 });
    const images: Array<{ ref: string; digest: string }> = [];
    for (let i = 0; i < 8; i++) {
      const im = assembleImage([
        await buildTestLayer(await makeTar([{ name: `f${i}`, content: `file ${i}\n` }]), 'estargz'),
      ]);
      const ref = `127.0.0.1:5000/many/img${i}:latest`;
      registry.set(ref, im);
      images.push({ ref, digest: im.layers[0]!.descriptor.digest });
    }
    // one image in use (use notification) and one with an open file: both must survive
    const held = images[0]!;
    const opened = images[1]!;
    await expect(store.vfs.create(`/${b64(held.ref)}/${held.digest}/use`, 0o644, ctx())).rejects.toThrow();
    const file = await store.vfs.open(`/${b64(opened.ref)}/${opened.digest}/diff/f1`, 0, ctx());
    for (const im of images) await store.vfs.getattr(`/${b64(im.ref)}/${im.digest}/diff`, ctx());
    // many more names (unknown digests of known refs: negative answers)
    for (let i = 0; i < 400; i++) {
      const name = `/${b64(images[i % 8]!.ref)}/sha256:${i.toString(16).padStart(64, '0')}/diff`;
      expect(errnoFor(await store.vfs.getattr(name, ctx()).catch((e: unknown) => e))).toBe('ENOENT');
    }
    // use/release of many names: a count back at zero is dropped
    for (let i = 0; i < 300; i++) {
      const p = `/${b64(images[2]!.ref)}/sha256:${(i + 1000).toString(16).padStart(64, '0')}`;
      await store.vfs.create(`${p}/use`, 0o644, ctx()).catch(() => undefined);
      await store.vfs.rmdir(p, ctx()).catch(() => undefined);
    }
    const c = store.counts();
    expect(c.names).toBeLessThanOrEqual(50);
    expect(c.refcounts).toBe(1);
    // 8 layers opened, at most 3 idle kept + the in-use one + the one with an open file
    expect(c.layers).toBeLessThanOrEqual(5);
    expect(closes).toBeGreaterThanOrEqual(3);
    // the kept ones still work without re-opening
    expect((await file.read(0, 100, sig())).toString()).toBe('file 1\n');
    const parses = tocParses;
    await store.vfs.getattr(`/${b64(held.ref)}/${held.digest}/diff/f0`, ctx());
    expect(tocParses).toBe(parses);
    file.release?.();
  });

  it('a closed idle layer re-opens from disk (no registry) with the same inode numbers', async () => {
    // the idle sweep (an interval) and the idle clock (Date) are fake: the test moves time itself
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    const store = open({ idleTtlMs: 50 });
    const im = assembleImage([
      await buildTestLayer(await makeTar([{ name: 'x', content: 'x\n' }]), 'estargz'),
    ]);
    const ref = '127.0.0.1:5000/idle/app:1';
    registry.set(ref, im);
    const p = `/${b64(ref)}/${im.layers[0]!.descriptor.digest}/diff/x`;
    const before = await store.vfs.getattr(p, ctx());
    // read once (the content lands in the chunk cache), then let the handle go idle
    const f0 = await store.vfs.open(p, 0, ctx());
    expect((await f0.read(0, 10, sig())).toString()).toBe('x\n');
    f0.release?.();
    const closed = closes;
    try {
      // the sweep runs at least every second
      await vi.advanceTimersByTimeAsync(1000);
    } finally {
      vi.useRealTimers();
    }
    await vi.waitFor(() => expect(closes).toBe(closed + 1));
    expect(store.counts().layers).toBe(0);
    registry.down = true;
    try {
      const after = await store.vfs.getattr(p, ctx());
      expect(after.ino).toBe(before.ino);
      const f = await store.vfs.open(p, 0, ctx());
      expect((await f.read(0, 10, sig())).toString()).toBe('x\n');
    } finally {
      registry.down = false;
    }
  });

  it('reads use the layer deadline, below the hard FUSE limit (no race on one number)', async () => {
    const store = open({ deadlines: { lookupMs: 2000, readMs: 300, syntheticMs: 500, fuseMs: 4000 } });
    const im = assembleImage([
      await buildTestLayer(await makeTar([{ name: 'slow', content: Buffer.alloc(100_000, 7) }]), 'estargz'),
    ]);
    const ref = '127.0.0.1:5000/deadline/app:1';
    registry.set(ref, im);
    const p = `/${b64(ref)}/${im.layers[0]!.descriptor.digest}/diff/slow`;
    const f = await store.vfs.open(p, 0, ctx());
    expect(store.vfs.deadlineMs('read', p)).toBe(4000);
    expect(store.vfs.deadlineMs('getattr', p)).toBe(4000);
    expect(store.vfs.deadlineMs('getattr', `/${b64(ref)}`)).toBe(500);
    // the second store below re-opens the layer from the first one's record
    await store.recordsSaved();
    registry.hangReads = true;
    try {
      // a store built the usual way (chunk cache, no layer factory): its layers get readMs
      const fast = createLayerStore({
        root,
        registry,
        cache,
        openLayer: defaultOpenLayer,
        deadlines: { lookupMs: 2000, readMs: 300, syntheticMs: 500, fuseMs: 4000 },
        layer: { backgroundFetch: false, prefetch: false },
      });
      stores.push(fast);
      const g = await fast.vfs.open(p, 0, ctx());
      const err = await g.read(0, 4096, sig()).catch((e: unknown) => e);
      expect(errnoFor(err)).toBe('EIO');
      // the layer's 300 ms, not the 4 s FUSE limit (and not the engine's 30 s default): the
      // deadline that fired says which one it was
      expect(err).toMatchObject({ code: 'E_DEADLINE', context: { deadlineMs: 300 } });
    } finally {
      registry.hangReads = false;
    }
    f.release?.();
  });
});

describe('readdir of a huge directory', () => {
  it('compares names in UTF-8 byte order (checked against Buffer.compare of the encodings)', () => {
    const sign = (n: number) => (n < 0 ? -1 : n > 0 ? 1 : 0);
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'grapheme' }), (a, b) => {
        expect(sign(utf8Compare(a, b))).toBe(sign(Buffer.compare(Buffer.from(a), Buffer.from(b))));
      }),
      { numRuns: 2000 },
    );
  });

  it('encodes each name once for the bytewise sort, and sorts like Go (UTF-8 byte order)', () => {
    const n = 5000;
    const children = new Map<string, TreeNode>();
    const node = (id: number, name: string, type: TreeNode['type']): TreeNode => ({
      id,
      name,
      path: name,
      type,
      mode: 0o644,
      uid: 0,
      gid: 0,
      mtime: 0,
      size: 0,
      linkName: '',
      devMajor: 0,
      devMinor: 0,
      xattrs: new Map(),
      chunks: [],
      nlink: 1,
    });
    const root = { ...node(1, '', 'dir'), children };
    const nodes: TreeNode[] = [root, root];
    // names whose UTF-16 order differs from their UTF-8 order (U+FF5E vs an astral character)
    const names = [
      '\u{ff5e}',
      '\u{1f600}',
      'a',
      'B',
      ...Array.from({ length: n }, (_, i) => `f${(i * 7919) % n}`),
    ];
    names.forEach((name, i) => {
      const c = node(i + 2, name, 'reg');
      children.set(name, c);
      nodes.push(c);
    });
    const index = { root, nodes } as unknown as LayerIndex;
    const view = new DiffView(index, new InoAllocator().layerBlock('k', nodes.length + 1));
    const spy = vi.spyOn(Buffer, 'from');
    let out: string[];
    try {
      out = view.readdir({ node: root, whiteout: false }).map((e) => e.name);
    } finally {
      spy.mockRestore();
    }
    expect(spy.mock.calls.length).toBeLessThanOrEqual(names.length);
    const want = [...names].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    expect(out).toEqual(want);
    expect(out.indexOf('\u{ff5e}')).toBeLessThan(out.indexOf('\u{1f600}'));
  });
});
