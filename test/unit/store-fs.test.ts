import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { errnoFor } from '../../src/fs/errno.js';
import {
  S_IFCHR,
  S_IFDIR,
  S_IFLNK,
  S_IFMT,
  S_IFREG,
  type OpContext,
  type VirtualFs,
} from '../../src/fs/vfs.js';
import { createLayerStore, type LayerStore } from '../../src/store/index.js';
import { defaultOpenLayer, lazyLayerFactory } from '../../src/store/default-deps.js';
import { gunzipSync } from 'node:zlib';
import {
  assembleImage,
  buildTestLayer,
  edgeCaseTar,
  FakeRegistry,
  makeTar,
  sha256,
  type BuiltImage,
} from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const ctx = (): OpContext => ({ signal: new AbortController().signal });
async function errno(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return errnoFor(err);
  }
  return 'OK';
}

describe('store VirtualFs (fake registry, real format reader and lazy layer)', () => {
  let root: string;
  let cache: ChunkCache;
  let registry: FakeRegistry;
  let store: LayerStore;
  let fs: VirtualFs;
  let tar: Buffer;
  let esgz: BuiltImage;
  let zstd: BuiltImage;
  let plain: BuiltImage;
  const REF = '127.0.0.1:5000/test/edge:esgz';
  const ZREF = '127.0.0.1:5000/test/edge:zstd';
  const GREF = '127.0.0.1:5000/test/edge:gzip';
  const HREF = '127.0.0.1:5000/test/hang:latest';
  const LOOKUP_MS = 1500;

  const open = () =>
    createLayerStore({
      root,
      registry,
      openLayer: defaultOpenLayer,
      createLayer: lazyLayerFactory(cache, { backgroundFetch: false }),
      deadlines: { lookupMs: LOOKUP_MS, readMs: 2000, syntheticMs: 500 },
      negativeTtlMs: 60_000,
    });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-storefs-'));
    cache = await ChunkCache.open({ root });
    tar = await edgeCaseTar();
    esgz = assembleImage([await buildTestLayer(tar, 'estargz')]);
    zstd = assembleImage([await buildTestLayer(tar, 'zstd:chunked')]);
    plain = assembleImage([await buildTestLayer(tar, 'gzip')]);
    registry = new FakeRegistry();
    registry.set(REF, esgz);
    registry.set(ZREF, zstd);
    registry.set(GREF, plain);
    registry.set(HREF, esgz);
    registry.hangRefs.add(HREF);
    store = open();
    fs = store.vfs;
  });

  afterAll(async () => {
    await store?.close();
    await rm(root, { recursive: true, force: true });
  });

  it('answers EINVAL for bad base64, bad references and bad digests; synthesises dirs without I/O', async () => {
    const calls = registry.imageCalls + registry.blobOpens;
    expect(await errno(fs.getattr('/!!!', ctx()))).toBe('EINVAL');
    expect(await errno(fs.getattr('/' + b64('not a ref'), ctx()))).toBe('EINVAL');
    expect(await errno(fs.getattr(`/${b64(REF)}/xyz`, ctx()))).toBe('EINVAL');
    expect(await errno(fs.getattr(`/${b64(REF)}/sha256:abc`, ctx()))).toBe('EINVAL');
    const dir = await fs.getattr(`/${b64(REF)}/sha256:${'0'.repeat(64)}`, ctx());
    expect(dir.mode & S_IFMT).toBe(S_IFDIR);
    expect((await fs.getattr(`/${b64(REF)}`, ctx())).mode & S_IFMT).toBe(S_IFDIR);
    expect(registry.imageCalls + registry.blobOpens).toBe(calls);
  });

  it('OLD protocol: blob-digest lookup serves diff/info/blob with the OLD info form', async () => {
    const l = esgz.layers[0]!;
    // independent of the writer: decompress the blob ourselves (test code, sync is fine here)
    const diff = gunzipSync(l.blob);
    const base = `/${b64(REF)}/${l.descriptor.digest}`;
    expect((await fs.getattr(`${base}/diff`, ctx())).mode & S_IFMT).toBe(S_IFDIR);
    const infoAttr = await fs.getattr(`${base}/info`, ctx());
    const f = await fs.open(`${base}/info`, 0, ctx());
    const info = await f.read(0, 4096, new AbortController().signal);
    expect(infoAttr.size).toBe(info.length);
    expect(info.toString().endsWith('\n')).toBe(true);
    expect(JSON.parse(info.toString())).toEqual({
      'compressed-diff-digest': sha256(l.blob),
      'compressed-size': l.blob.length,
      'diff-digest': sha256(diff),
      'diff-size': diff.length,
      compression: 2,
    });
    const blobAttr = await fs.getattr(`${base}/blob`, ctx());
    expect(blobAttr.size).toBe(l.blob.length);
    const bf = await fs.open(`${base}/blob`, 0, ctx());
    const got = await bf.read(0, l.blob.length + 100, new AbortController().signal);
    expect(sha256(got)).toBe(sha256(l.blob));
  });

  it('NEW protocol: TOC-digest lookup gives the NEW info form (gzip 2, zstd 4)', async () => {
    for (const [ref, img, comp] of [
      [REF, esgz, 2],
      [ZREF, zstd, 4],
    ] as const) {
      const l = img.layers[0]!;
      const toc = l.tocDigest!;
      expect(toc).not.toBe(l.descriptor.digest);
      const base = `/${b64(ref)}/${toc}`;
      await fs.getattr(`${base}/diff`, ctx());
      const attr = await fs.getattr(`${base}/info`, ctx());
      const info = await (
        await fs.open(`${base}/info`, 0, ctx())
      ).read(0, 4096, new AbortController().signal);
      expect(attr.size).toBe(info.length);
      expect(info.toString()).toBe(
        `{"diff-size":-1,"compression":${comp},"toc-digest":"${toc}","flags":{"expected-layer-diffid":"${l.diffId}"}}\n`,
      );
      expect((await fs.getattr(`${base}/blob`, ctx())).size).toBe(l.blob.length);
    }
  });

  it('plain gzip and unknown digests: ENOENT at the first lookup, negative-cached', async () => {
    const l = plain.layers[0]!;
    const base = `/${b64(GREF)}/${l.descriptor.digest}`;
    expect(await errno(fs.getattr(`${base}/diff`, ctx()))).toBe('ENOENT');
    const calls = registry.imageCalls;
    expect(await errno(fs.getattr(`${base}/info`, ctx()))).toBe('ENOENT');
    expect(await errno(fs.getattr(`${base}/blob`, ctx()))).toBe('ENOENT');
    expect(registry.imageCalls).toBe(calls);
    expect(await errno(fs.getattr(`/${b64(REF)}/sha256:${'1'.repeat(64)}/diff`, ctx()))).toBe('ENOENT');
    const st = store.status().find((s) => s.digest === l.descriptor.digest);
    expect(st).toMatchObject({ lazy: false, ref: GREF });
    expect(st!.reason).toMatch(/no TOC/);
  });

  it('use/release: create use -> ENOENT +1, rmdir -> ENOENT -1 (also untracked), layer stays resolvable', async () => {
    const d = esgz.layers[0]!.descriptor.digest;
    const base = `/${b64(REF)}/${d}`;
    expect(await errno(fs.getattr(`${base}/use`, ctx()))).toBe('ENOENT');
    expect(await errno(fs.create(`${base}/use`, 0o666, ctx()))).toBe('ENOENT');
    expect(await errno(fs.create(`${base}/use`, 0o666, ctx()))).toBe('ENOENT');
    expect(store.status().find((s) => s.digest === d)!.refs).toBe(2);
    expect(await errno(fs.rmdir(base, ctx()))).toBe('ENOENT');
    expect(await errno(fs.rmdir(base, ctx()))).toBe('ENOENT');
    expect(await errno(fs.rmdir(base, ctx()))).toBe('ENOENT');
    expect(store.status().find((s) => s.digest === d)!.refs).toBe(0);
    expect(await errno(fs.rmdir(`/${b64(REF)}/sha256:${'2'.repeat(64)}`, ctx()))).toBe('ENOENT');
    expect(await errno(fs.rmdir(`/${b64(REF)}/bad`, ctx()))).toBe('EINVAL');
    expect((await fs.getattr(`${base}/diff/foo/bar.txt`, ctx())).size).toBe(12);
  });

  it('diff tree: whiteouts, opaque dirs, hidden landmarks, hardlinks, devices, xattrs, reads', async () => {
    const d = `/${b64(REF)}/${esgz.layers[0]!.descriptor.digest}/diff`;
    const names = (await fs.readdir(`${d}/foo`, ctx())).map((e) => e.name);
    expect(names).toEqual(['.prefetch.landmark', 'bar.txt', 'gone', 'hard', 'link']);
    const gone = (await fs.readdir(`${d}/foo`, ctx())).find((e) => e.name === 'gone')!;
    expect(gone.attr).toMatchObject({ mode: S_IFCHR, rdev: 0, size: 0 });
    expect(await fs.getattr(`${d}/foo/gone`, ctx())).toMatchObject({ mode: S_IFCHR, rdev: 0 });
    expect(await errno(fs.getattr(`${d}/foo/.wh.gone`, ctx()))).toBe('ENOENT');
    const rootNames = (await fs.readdir(d, ctx())).map((e) => e.name);
    expect(rootNames).not.toContain('.prefetch.landmark');
    expect(rootNames).not.toContain('.no.prefetch.landmark');
    expect(await errno(fs.getattr(`${d}/.no.prefetch.landmark`, ctx()))).toBe('ENOENT');
    expect(await errno(fs.getattr(`${d}/.prefetch.landmark`, ctx()))).toBe('ENOENT');
    expect((await fs.readdir(`${d}/opq`, ctx())).map((e) => e.name)).toEqual(['kept']);
    expect((await fs.getxattr(`${d}/opq`, 'trusted.overlay.opaque', ctx()))?.toString()).toBe('y');
    expect((await fs.getxattr(`${d}/opq`, 'user.overlay.opaque', ctx()))?.toString()).toBe('y');
    expect(await fs.listxattr(`${d}/opq`, ctx())).toEqual(['trusted.overlay.opaque', 'user.overlay.opaque']);
    expect(await fs.getxattr(`${d}/foo`, 'trusted.overlay.opaque', ctx())).toBeUndefined();
    expect((await fs.getxattr(`${d}/x/xattr-file`, 'user.k', ctx()))?.toString()).toBe('v');
    const bar = await fs.getattr(`${d}/foo/bar.txt`, ctx());
    const hard = await fs.getattr(`${d}/foo/hard`, ctx());
    expect(bar).toMatchObject({
      mode: S_IFREG | 0o640,
      uid: 1000,
      gid: 1001,
      nlink: 2,
      mtime: Date.parse('2020-01-02T03:04:05Z') / 1000,
    });
    expect(hard.ino).toBe(bar.ino);
    expect((await fs.getattr(`${d}/foo/link`, ctx())).mode & S_IFMT).toBe(S_IFLNK);
    expect(await fs.readlink(`${d}/foo/link`, ctx())).toBe('bar.txt');
    const tty = await fs.getattr(`${d}/dev/tty9`, ctx());
    expect(tty.mode).toBe(S_IFCHR | 0o620);
    expect(tty.rdev).toBe((4 << 8) | 9);
    expect((await fs.getattr(d, ctx())).mode).toBe(S_IFDIR | 0o755);
    const big = await fs.open(`${d}/big.bin`, 0, ctx());
    const want = Buffer.alloc(5 * 1024 * 1024);
    for (let i = 0; i < want.length; i++) want[i] = (i * 7 + (i >> 13)) & 0xff;
    const sig = new AbortController().signal;
    expect(
      (await big.read(4 * 1024 * 1024 - 10, 20, sig)).equals(
        want.subarray(4 * 1024 * 1024 - 10, 4 * 1024 * 1024 + 10),
      ),
    ).toBe(true);
    expect((await big.read(want.length - 5, 100, sig)).equals(want.subarray(want.length - 5))).toBe(true);
    expect((await big.read(want.length + 5, 100, sig)).length).toBe(0);
    expect(await errno(fs.open(`${d}/big.bin`, 1, ctx()))).toBe('EROFS');
    expect(await errno(fs.create(`${d}/new`, 0o644, ctx()))).toBe('EROFS');
  });

  it('a TOC that does not match the digest the image names is never served (ENOENT, both protocols)', async () => {
    const good = esgz.layers[0]!;
    const wrong = `sha256:${'e'.repeat(64)}`;
    const bad = assembleImage([
      {
        ...good,
        descriptor: {
          ...good.descriptor,
          annotations: { ...good.descriptor.annotations, 'containerd.io/snapshot/stargz/toc.digest': wrong },
        },
      },
    ]);
    const BREF = '127.0.0.1:5000/test/bad:toc';
    registry.set(BREF, bad);
    expect(await errno(fs.getattr(`/${b64(BREF)}/${good.descriptor.digest}/diff`, ctx()))).toBe('ENOENT');
    expect(await errno(fs.getattr(`/${b64(BREF)}/${wrong}/blob`, ctx()))).toBe('ENOENT');
    const st = store.status().filter((x) => x.ref === BREF);
    expect(st.length).toBe(2);
    for (const x of st) {
      expect(x.lazy).toBe(false);
      expect(x.reason).toMatch(/TOC/);
    }
  });

  it('a hanging registry: lookups answer ENOENT at the deadline, other layers keep working', async () => {
    // The lookup budget runs on a fake clock (timers and Date): no real waiting, no timing margins.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    try {
      let hungSettled = false;
      const hung = fs.getattr(`/${b64(HREF)}/${esgz.layers[0]!.descriptor.digest}/diff`, ctx());
      hung.then(
        () => (hungSettled = true),
        () => (hungSettled = true),
      );
      const other = fs.getattr(`/${b64(ZREF)}/${zstd.layers[0]!.descriptor.digest}/diff`, ctx());
      expect((await other).mode & S_IFMT).toBe(S_IFDIR);
      // the other layer did not wait for the hung one
      expect(hungSettled).toBe(false);
      // answered at the budget, not before
      await vi.advanceTimersByTimeAsync(LOOKUP_MS - 1);
      expect(hungSettled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(hungSettled).toBe(true);
      expect(await errno(hung)).toBe('ENOENT');
      // the resolution is still running in the background: a second lookup (the kernel serialises
      // lookups of one name) does not wait another budget; the clock does not move for it
      expect(await errno(fs.getattr(`/${b64(HREF)}/${esgz.layers[0]!.descriptor.digest}/info`, ctx()))).toBe(
        'ENOENT',
      );
      // inside diff the same failure is EIO (never "absent")
      expect(
        await errno(fs.getattr(`/${b64(HREF)}/${esgz.layers[0]!.descriptor.digest}/diff/foo`, ctx())),
      ).toBe('EIO');
    } finally {
      vi.useRealTimers();
    }
  });

  it('after a restart, a pulled layer resolves from the persisted record even when the tag moved', async () => {
    const d = esgz.layers[0]!.descriptor.digest;
    const before = await (
      await fs.open(`/${b64(REF)}/${d}/info`, 0, ctx())
    ).read(0, 4096, new AbortController().signal);
    // the tag now points at a different image
    const other = assembleImage([
      await buildTestLayer(await makeTar([{ name: 'other', content: 'x' }]), 'estargz'),
    ]);
    registry.set(REF, other);
    const store2 = open();
    try {
      const fs2 = store2.vfs;
      const calls = registry.imageCalls;
      expect((await fs2.getattr(`/${b64(REF)}/${d}/diff/foo/bar.txt`, ctx())).size).toBe(12);
      const after = await (
        await fs2.open(`/${b64(REF)}/${d}/info`, 0, ctx())
      ).read(0, 4096, new AbortController().signal);
      expect(after.equals(before)).toBe(true);
      expect(registry.imageCalls).toBe(calls);
    } finally {
      await store2.close();
      registry.set(REF, esgz);
    }
  });
});
