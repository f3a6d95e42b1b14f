import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { RegistryClient } from '../../src/registry/index.js';
import { createLayerStore, mountStore, type LayerStore, type StoreMount } from '../../src/store/index.js';
import { S_IFCHR, S_IFDIR, S_IFMT } from '../../src/fs/vfs.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { probe, probeOne, runChild } from '../helpers/fuse.js';
import {
  assembleImage,
  buildTestLayer,
  decompressBlob,
  edgeCaseTar,
  makeTar,
  pushImage,
  sha256,
  startCountingProxy,
  type BuiltImage,
  type CountingProxy,
} from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
type Errno = { errno: string; ms: number };

/**
 * stargz-format.md §9.3 store checks 10-16 and the NEW-protocol conformance, through a real FUSE
 * mount served by this process, against a real docker-registry, probed from child processes.
 */
describe('store through a real FUSE mount and a real registry', () => {
  let registry: TestRegistry;
  let proxy: CountingProxy;
  let dir: string;
  let mnt: string;
  let cache: ChunkCache;
  let client: RegistryClient;
  let store: LayerStore;
  let mount: StoreMount;
  let tar: Buffer;
  let esgz: BuiltImage;
  let zstd: BuiltImage;
  let plain: BuiltImage;
  let ESGZ: string;
  let ZSTD: string;
  let GZIP: string;
  const LOOKUP_MS = 1500;

  const start = async () => {
    store = createLayerStore({
      root: join(dir, 'root'),
      registry: client,
      cache,
      deadlines: { lookupMs: LOOKUP_MS, readMs: 1500, syntheticMs: 1000 },
      layer: { backgroundFetch: false, prefetch: false },
    });
    mount = await mountStore(mnt, store, { allowOther: true });
  };
  const stop = async () => {
    await mount.unmount();
    await store.close();
  };

  beforeAll(async () => {
    registry = await startRegistry();
    proxy = await startCountingProxy(registry.host);
    dir = await mkdtemp(join(tmpdir(), 'sgz-storemnt-'));
    mnt = join(dir, 'store');
    await mkdir(mnt);
    tar = await edgeCaseTar();
    esgz = assembleImage([await buildTestLayer(tar, 'estargz')]);
    zstd = assembleImage([await buildTestLayer(tar, 'zstd:chunked')]);
    plain = assembleImage([await buildTestLayer(tar, 'gzip')]);
    await pushImage(registry.url, 'test/edge', 'esgz', esgz);
    await pushImage(registry.url, 'test/edge', 'zstd', zstd);
    await pushImage(registry.url, 'test/edge', 'gzip', plain);
    ESGZ = `${registry.host}/test/edge:esgz`;
    ZSTD = `${registry.host}/test/edge:zstd`;
    GZIP = `${registry.host}/test/edge:gzip`;
    cache = await ChunkCache.open({ root: join(dir, 'root') });
    client = new RegistryClient({ retry: { maxRetries: 0 }, requestTimeoutMs: 5000 });
    await start();
  });

  afterAll(async () => {
    await mount?.unmount().catch(() => undefined);
    await store?.close();
    await client?.close();
    await proxy?.stop();
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('check 10: EINVAL for bad names; ref and layer dirs are synthesised without registry traffic', async () => {
    const before = registry.log.filter((l) => l.includes('/v2/')).length;
    const r = await probe([
      { op: 'stat', path: join(mnt, '!!!') },
      { op: 'stat', path: join(mnt, b64('not a ref')) },
      { op: 'stat', path: join(mnt, b64(ESGZ), 'xyz') },
      { op: 'stat', path: join(mnt, b64(ESGZ), `sha256:${'a'.repeat(64)}`) },
      { op: 'stat', path: join(mnt, b64(ESGZ)) },
    ]);
    expect(r[0]).toMatchObject({ errno: 'EINVAL' });
    expect(r[1]).toMatchObject({ errno: 'EINVAL' });
    expect(r[2]).toMatchObject({ errno: 'EINVAL' });
    expect((r[3] as { mode: number }).mode & S_IFMT).toBe(S_IFDIR);
    expect((r[4] as { mode: number }).mode & S_IFMT).toBe(S_IFDIR);
    await new Promise((res) => setTimeout(res, 200));
    expect(registry.log.filter((l) => l.includes('/v2/')).length).toBe(before);
  });

  it('check 11 (OLD): blob-digest lookup -> diff dir, info with exact size and diff-digest, blob', async () => {
    const l = esgz.layers[0]!;
    const base = join(mnt, b64(ESGZ), l.descriptor.digest);
    const diff = await decompressBlob(l.blob, false);
    const r = await probe([
      { op: 'stat', path: join(base, 'diff') },
      { op: 'stat', path: join(base, 'info') },
      { op: 'read', path: join(base, 'info') },
      { op: 'access', path: join(base, 'blob') },
    ]);
    expect((r[0] as { mode: number }).mode).toBe(S_IFDIR | 0o755);
    const info = Buffer.from((r[2] as { hex: string }).hex, 'hex');
    expect((r[1] as { size: number }).size).toBe(info.length);
    expect(JSON.parse(info.toString())).toEqual({
      'compressed-diff-digest': l.descriptor.digest,
      'compressed-size': l.blob.length,
      'diff-digest': sha256(diff),
      'diff-size': diff.length,
      compression: 2,
    });
    expect(r[3]).toBe(true);
  });

  it('NEW protocol conformance: TOC-digest lookups, info with toc-digest and expected-layer-diffid', async () => {
    for (const [ref, img, comp, zst] of [
      [ESGZ, esgz, 2, false],
      [ZSTD, zstd, 4, true],
    ] as const) {
      const l = img.layers[0]!;
      const toc =
        l.descriptor.annotations['containerd.io/snapshot/stargz/toc.digest'] ??
        l.descriptor.annotations['io.github.containers.zstd-chunked.manifest-checksum'] ??
        l.descriptor.annotations['io.containers.zstd-chunked.manifest-checksum'];
      expect(toc).toBeDefined();
      const base = join(mnt, b64(ref), toc!);
      // c/storage >= 1.54 probes with faccessat(F_OK) in the order diff, info, blob
      const r = await probe([
        { op: 'access', path: join(base, 'diff') },
        { op: 'access', path: join(base, 'info') },
        { op: 'access', path: join(base, 'blob') },
        { op: 'stat', path: join(base, 'info') },
        { op: 'read', path: join(base, 'info') },
        { op: 'stat', path: join(base, 'blob') },
        { op: 'create', path: join(base, 'use') },
        { op: 'rmdir', path: base },
      ]);
      expect(r.slice(0, 3)).toEqual([true, true, true]);
      const info = Buffer.from((r[4] as { hex: string }).hex, 'hex').toString();
      const diffId = sha256(await decompressBlob(l.blob, zst));
      expect(info).toBe(
        `{"diff-size":-1,"compression":${comp},"toc-digest":"${toc}","flags":{"expected-layer-diffid":"${diffId}"}}\n`,
      );
      expect((r[3] as { size: number }).size).toBe(Buffer.byteLength(info));
      expect((r[5] as { size: number }).size).toBe(l.blob.length);
      expect(r[6]).toMatchObject({ errno: 'ENOENT' });
      expect(r[7]).toMatchObject({ errno: 'ENOENT' });
    }
  });

  it('check 12: an unknown TOC digest and a plain gzip layer answer ENOENT quickly (normal pull)', async () => {
    const g = plain.layers[0]!;
    const r = await probe([
      { op: 'stat', path: join(mnt, b64(ESGZ), `sha256:${'b'.repeat(64)}`, 'diff') },
      { op: 'stat', path: join(mnt, b64(GZIP), g.descriptor.digest, 'diff') },
      { op: 'stat', path: join(mnt, b64(GZIP), g.descriptor.digest, 'info') },
      { op: 'stat', path: join(mnt, b64(GZIP), g.descriptor.digest, 'blob') },
    ]);
    for (const x of r) expect(x).toMatchObject({ errno: 'ENOENT' });
    for (const x of r) expect((x as Errno).ms).toBeLessThan(LOOKUP_MS);
    const st = store.status().find((s) => s.digest === g.descriptor.digest);
    expect(st).toMatchObject({ lazy: false });
  });

  it('check 13: use -> ENOENT and refcount+1; rmdir -> ENOENT and -1 (untracked too); stat use -> ENOENT', async () => {
    const d = esgz.layers[0]!.descriptor.digest;
    const base = join(mnt, b64(ESGZ), d);
    const r = await probe([
      { op: 'stat', path: join(base, 'use') },
      { op: 'create', path: join(base, 'use') },
      { op: 'create', path: join(base, 'use') },
    ]);
    expect(r).toMatchObject([{ errno: 'ENOENT' }, { errno: 'ENOENT' }, { errno: 'ENOENT' }]);
    expect(store.status().find((s) => s.ref === ESGZ && s.digest === d)!.refs).toBe(2);
    const r2 = await probe([
      { op: 'rmdir', path: base },
      { op: 'rmdir', path: join(mnt, b64(ESGZ), `sha256:${'c'.repeat(64)}`) },
      { op: 'rmdir', path: join(mnt, b64(ESGZ), 'nodigest') },
      { op: 'stat', path: join(base, 'diff', 'foo', 'bar.txt') },
    ]);
    expect(r2[0]).toMatchObject({ errno: 'ENOENT' });
    expect(r2[1]).toMatchObject({ errno: 'ENOENT' });
    expect(r2[2]).toMatchObject({ errno: 'EINVAL' });
    expect((r2[3] as { size: number }).size).toBe(12);
    expect(store.status().find((s) => s.ref === ESGZ && s.digest === d)!.refs).toBe(1);
  });

  it('checks 14-15: whiteouts are char 0:0 (DT_CHR) with .wh.* hidden, opaque xattrs, landmarks hidden at the root only', async () => {
    const diff = join(mnt, b64(ESGZ), esgz.layers[0]!.descriptor.digest, 'diff');
    const r = await probe([
      { op: 'readdir', path: join(diff, 'foo') },
      { op: 'lstat', path: join(diff, 'foo', 'gone') },
      { op: 'lstat', path: join(diff, 'foo', '.wh.gone') },
      { op: 'getxattr', path: join(diff, 'opq'), name: 'trusted.overlay.opaque' },
      { op: 'getxattr', path: join(diff, 'opq'), name: 'user.overlay.opaque' },
      { op: 'listxattr', path: join(diff, 'opq') },
      { op: 'readdir', path: join(diff, 'opq') },
      { op: 'readdir', path: diff },
      { op: 'stat', path: join(diff, '.no.prefetch.landmark') },
      { op: 'read', path: join(diff, 'foo', '.prefetch.landmark') },
      { op: 'getxattr', path: join(diff, 'x', 'xattr-file'), name: 'user.k' },
      { op: 'getxattr', path: join(diff, 'foo'), name: 'trusted.overlay.opaque' },
      { op: 'lstat', path: join(diff, 'dev', 'tty9') },
      { op: 'stat', path: join(diff, 'foo', 'bar.txt') },
      { op: 'stat', path: join(diff, 'foo', 'hard') },
      { op: 'readlink', path: join(diff, 'foo', 'link') },
    ]);
    const foo = r[0] as Array<{ name: string; type: string }>;
    expect(foo.map((e) => e.name)).toEqual([
      '.',
      '..',
      '.prefetch.landmark',
      'bar.txt',
      'gone',
      'hard',
      'link',
    ]);
    expect(foo.find((e) => e.name === 'gone')!.type).toBe('chr');
    expect(r[1]).toMatchObject({ mode: S_IFCHR, rdevMajor: 0, rdevMinor: 0, size: 0 });
    expect(r[2]).toMatchObject({ errno: 'ENOENT' });
    expect(r[3]).toBe('y');
    expect(r[4]).toBe('y');
    expect(r[5]).toEqual(['trusted.overlay.opaque', 'user.overlay.opaque']);
    expect((r[6] as Array<{ name: string }>).map((e) => e.name)).toEqual(['.', '..', 'kept']);
    const rootNames = (r[7] as Array<{ name: string }>).map((e) => e.name);
    expect(rootNames).toEqual(['.', '..', 'big.bin', 'dev', 'foo', 'opq', 'x']);
    expect(r[8]).toMatchObject({ errno: 'ENOENT' });
    expect(Buffer.from((r[9] as { hex: string }).hex, 'hex').toString()).toBe('visible in a subdirectory');
    expect(r[10]).toBe('v');
    expect(r[11]).toMatchObject({ errno: 'ENODATA' });
    expect(r[12]).toMatchObject({ mode: S_IFCHR | 0o620, rdevMajor: 4, rdevMinor: 9 });
    expect((r[13] as { ino: number }).ino).toBe((r[14] as { ino: number }).ino);
    expect((r[13] as { nlink: number }).nlink).toBe(2);
    expect(r[15]).toBe('bar.txt');
    // `ls -l` (coreutils) agrees on the whiteout being a character device 0, 0
    const ls = await runChild('ls', ['-l', join(diff, 'foo')]);
    expect(ls.stdout).toMatch(/^c--------- .* 0, +0 .* gone$/m);
  });

  it('check 16: blob has the registry Content-Length and the exact bytes; file content is exact', async () => {
    for (const [ref, img] of [
      [ESGZ, esgz],
      [ZSTD, zstd],
    ] as const) {
      const l = img.layers[0]!;
      const head = await fetch(`${registry.url}/v2/test/edge/blobs/${l.descriptor.digest}`, {
        method: 'HEAD',
      });
      const base = join(mnt, b64(ref), l.descriptor.digest);
      const r = await probe([
        { op: 'stat', path: join(base, 'blob') },
        { op: 'sha256', path: join(base, 'blob') },
        { op: 'sha256', path: join(base, 'diff', 'big.bin') },
      ]);
      expect((r[0] as { size: number }).size).toBe(Number(head.headers.get('content-length')));
      expect(r[1]).toEqual({ sha256: l.descriptor.digest, length: l.blob.length });
      const big = Buffer.alloc(5 * 1024 * 1024);
      for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 13)) & 0xff;
      expect(r[2]).toEqual({ sha256: sha256(big), length: big.length });
    }
  });

  it('a hanging registry: lookups and reads answer within the deadline, other layers keep working', async () => {
    // content that no cache holds yet: 3 MiB of random bytes
    const rnd = assembleImage([
      await buildTestLayer(await makeTar([{ name: 'random.bin', content: randomBytes(3 << 20) }]), 'estargz'),
    ]);
    await pushImage(registry.url, 'test/rnd', 'esgz', rnd);
    const d = rnd.layers[0]!.descriptor.digest;
    const slowDiff = join(mnt, b64(`${proxy.host}/test/rnd:esgz`), d, 'diff');
    // resolve through the proxy while it still answers (TOC only), then make it hang
    expect(await probeOne({ op: 'stat', path: join(slowDiff, 'random.bin') })).toMatchObject({
      size: 3 << 20,
    });
    proxy.hang = true;
    try {
      const hangRef = `${proxy.host}/test/edge:zstd`;
      const t0 = Date.now();
      const [lookup, read, other] = await Promise.all([
        probeOne<Errno>({
          op: 'stat',
          path: join(mnt, b64(hangRef), zstd.layers[0]!.descriptor.digest, 'diff'),
        }),
        // not read before through this ref: needs the (hanging) registry
        probeOne<Errno>({ op: 'read', path: join(slowDiff, 'random.bin'), offset: 0, length: 4096 }),
        probeOne<{ size: number }>({
          op: 'stat',
          path: join(mnt, b64(ZSTD), zstd.layers[0]!.descriptor.digest, 'diff', 'foo', 'bar.txt'),
        }),
      ]);
      expect(lookup).toMatchObject({ errno: 'ENOENT' });
      expect(read).toMatchObject({ errno: 'EIO' });
      expect(read.ms).toBeLessThan(1500 + 3000);
      expect(other.size).toBe(12);
      expect(Date.now() - t0).toBeLessThan(LOOKUP_MS + 5000);
    } finally {
      proxy.hang = false;
    }
  });

  it('after a restart (unmount, new store) a resolved layer is served from its record even though the tag moved', async () => {
    const l = esgz.layers[0]!;
    const infoPath = join(mnt, b64(ESGZ), l.descriptor.digest, 'info');
    const before = await probeOne<{ hex: string }>({ op: 'read', path: infoPath });
    await stop();
    // move the tag to another image
    await pushImage(
      registry.url,
      'test/edge',
      'esgz',
      assembleImage([await buildTestLayer(await makeTar([{ name: 'new', content: 'n' }]), 'estargz')]),
    );
    await start();
    const r = await probe([
      { op: 'read', path: join(mnt, b64(ESGZ), l.descriptor.digest, 'diff', 'foo', 'bar.txt') },
      { op: 'read', path: infoPath },
    ]);
    expect(Buffer.from((r[0] as { hex: string }).hex, 'hex').toString()).toBe('bar content\n');
    expect((r[1] as { hex: string }).hex).toBe(before.hex);
  });
});
