import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { RegistryClient, type HostsConfig, type PassingBytesSink } from '../../src/registry/index.js';
import { createLayerStore, mountStore, type LayerStore, type StoreMount } from '../../src/store/index.js';
import { silentLogger } from '../../src/util/logger.js';
import { TestPodman, runCommand } from '../helpers/podman.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import {
  assembleImage,
  buildTestLayer,
  makeTar,
  pushImage,
  startCountingProxy,
  type CountingProxy,
  type TarEntry,
} from '../helpers/store.js';

/**
 * Issue 15, Done-when #1: a lazy Podman start through a real docker-registry pull-through cache
 * (Distribution proxy mode, cold: it answers every ranged GET with 200 and the whole blob). The
 * start succeeds, the layer leaves the mirror at most 1.2x its compressed size, and nothing of it
 * comes from the origin. The cold start time beside a direct start is reported (not asserted).
 *
 * The store's client gets a passing-bytes sink (in memory here; in the store, the local
 * compressed-bytes store): without one, every read behind a whole-blob stream would need a new
 * stream.
 */

/** Passing bytes kept in memory per digest (what the local compressed-bytes store does on disk). */
class MemorySink implements PassingBytesSink {
  private readonly blobs = new Map<string, { data: Buffer; have: Uint8Array }>();
  constructor(private readonly sizes: Map<string, number>) {}
  onPassingBytes(digest: string, offset: number, buf: Buffer): void {
    const size = this.sizes.get(digest);
    if (size === undefined) return;
    let e = this.blobs.get(digest);
    if (!e) {
      e = { data: Buffer.alloc(size), have: new Uint8Array(size) };
      this.blobs.set(digest, e);
    }
    buf.copy(e.data, offset);
    e.have.fill(1, offset, offset + buf.length);
  }
  readPassed(digest: string, offset: number, length: number): Promise<Buffer | undefined> {
    const e = this.blobs.get(digest);
    if (!e || e.have.subarray(offset, offset + length).includes(0)) return Promise.resolve(undefined);
    return Promise.resolve(Buffer.from(e.data.subarray(offset, offset + length)));
  }
}

interface Started {
  store: LayerStore;
  mount: StoreMount;
  client: RegistryClient;
  podman: TestPodman;
}

describe('Podman lazy start through a docker-registry pull-through mirror', () => {
  let dir: string;
  let origin: TestRegistry;
  let mirror: TestRegistry;
  let originCount: CountingProxy;
  let mirrorCount: CountingProxy;
  let layerDigest: string;
  let layerSize: number;
  let expectedOut: string;
  const started: Started[] = [];

  beforeAll(async () => {
    for (const tool of ['podman', 'busybox']) {
      const w = await runCommand(['sh', '-c', `command -v ${tool}`]);
      if (w.code !== 0) throw new Error(`${tool} is not installed: this Podman test needs it`);
    }
    dir = await mkdtemp(join(tmpdir(), 'sgz-fleet-podman-'));
    origin = await startRegistry();
    mirror = await startRegistry({ proxyRemoteUrl: origin.url });
    originCount = await startCountingProxy(origin.host);
    mirrorCount = await startCountingProxy(mirror.host);

    const busybox = await readFile('/bin/busybox');
    const entries: TarEntry[] = [
      { name: 'bin/', type: 'directory' },
      { name: 'bin/busybox', content: busybox, mode: 0o755 },
      ...['sh', 'cat', 'head', 'sha256sum'].map((n) => ({
        name: `bin/${n}`,
        type: 'symlink' as const,
        linkname: 'busybox',
      })),
      { name: 'data/', type: 'directory' },
      { name: 'data/hello.txt', content: 'hello through the mirror\n' },
    ];
    let probe = Buffer.alloc(0);
    for (let i = 0; i < 16; i++) {
      const content = randomBytes(1 << 20);
      if (i === 7) probe = content;
      entries.push({ name: `data/blob-${String(i).padStart(2, '0')}.bin`, content });
    }
    expectedOut = `hello through the mirror\n${createHash('sha256').update(probe.subarray(0, 4096)).digest('hex')}  -\n`;
    const img = assembleImage([await buildTestLayer(await makeTar(entries), 'estargz')], {
      Entrypoint: ['/bin/sh', '-c'],
      Cmd: ['cat /data/hello.txt && head -c 4096 /data/blob-07.bin | sha256sum'],
    });
    await pushImage(origin.url, 'fleet/app', '1', img);
    layerDigest = img.layers[0]!.descriptor.digest;
    layerSize = img.layers[0]!.descriptor.size;
  }, 300_000);

  afterAll(async () => {
    for (const s of started.splice(0)) {
      await s.podman.cleanup().catch(() => undefined);
      await s.mount.unmount().catch(() => undefined);
      await s.store.close().catch(() => undefined);
      await s.client.close();
    }
    await mirrorCount?.stop();
    await originCount?.stop();
    await mirror?.stop();
    await origin?.stop();
    if (dir) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }, 180_000);

  /** A fresh store (own cache, own mount) and Podman using it; pull + run; milliseconds taken. */
  async function coldStart(name: string, hosts: HostsConfig): Promise<number> {
    const root = join(dir, name);
    const mnt = join(root, 'mnt');
    await mkdir(mnt, { recursive: true });
    const client = new RegistryClient({
      hosts,
      requestTimeoutMs: 20_000,
      passingBytesSink: new MemorySink(new Map([[layerDigest, layerSize]])),
    });
    const cache = await ChunkCache.open({ root: join(root, 'root') });
    // no background fetch: the byte counts show what the start itself read
    const store = createLayerStore({
      root: join(root, 'root'),
      registry: client,
      cache,
      logger: silentLogger,
      layer: { backgroundFetch: false },
    });
    const mount = await mountStore(mnt, store, { allowOther: true });
    const podman = await TestPodman.create({
      baseDir: root,
      insecureRegistries: [originCount.host],
      additionalLayerStore: mnt,
    });
    started.push({ store, mount, client, podman });
    const ref = `${originCount.host}/fleet/app:1`;
    const t0 = process.hrtime.bigint();
    await podman.podmanOk(['pull', '-q', '--tls-verify=false', ref], { timeoutMs: 180_000 });
    const run = await podman.podmanOk(['run', '--rm', ref], { timeoutMs: 120_000 });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    expect(run.stdout).toBe(expectedOut);
    const st = store.status().find((s) => s.digest === layerDigest);
    expect(st?.lazy).toBe(true);
    return ms;
  }

  it('starts lazily through a cold mirror: layer bytes from the mirror <= 1.2x its size, none from the origin', async () => {
    const directMs = await coldStart('direct', {});
    const directBytes = originCount.bytesByDigest.get(layerDigest) ?? 0;
    expect(directBytes).toBeGreaterThan(0);
    expect(directBytes).toBeLessThan(layerSize);

    const hosts: HostsConfig = { [originCount.host]: { mirrors: [{ host: mirrorCount.host }] } };
    const mirrorMs = await coldStart('mirror', hosts);
    const mirrorBytes = mirrorCount.bytesByDigest.get(layerDigest) ?? 0;
    // the store read the layer only through the mirror (Podman took nothing of it: lazy)
    expect(originCount.bytesByDigest.get(layerDigest) ?? 0).toBe(directBytes);
    expect(mirrorBytes).toBeGreaterThan(0);
    expect(mirrorBytes).toBeLessThanOrEqual(1.2 * layerSize);
    // every blob request to the mirror names the upstream registry
    const blobReqs = mirrorCount.requests.filter((r) => r.includes('/blobs/'));
    expect(blobReqs.length).toBeGreaterThan(0);
    expect(blobReqs.every((r) => r.includes(`ns=${encodeURIComponent(originCount.host)}`))).toBe(true);
    console.log(
      JSON.stringify({
        layerSize,
        direct: { ms: Math.round(directMs), originLayerBytes: directBytes },
        mirror: { ms: Math.round(mirrorMs), mirrorLayerBytes: mirrorBytes, ratio: mirrorMs / directMs },
      }),
    );
  }, 600_000);
});
