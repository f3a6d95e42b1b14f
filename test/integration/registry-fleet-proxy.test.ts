import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLayer } from '../../src/format/open-layer.js';
import { lookupPath } from '../../src/format/model.js';
import { readFileRange } from '../../src/format/read-file.js';
import { RangeFetchShared, RegistryBlobReader } from '../../src/registry/blob-reader.js';
import { resolveEndpoints, type HostsConfig } from '../../src/registry/hosts.js';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import { retryPolicy } from '../../src/registry/retry.js';
import { Transport } from '../../src/registry/transport.js';
import type { PassingBytesSink } from '../../src/registry/whole-blob-stream.js';
import {
  buildAndPushImage,
  encodeLayer,
  makeTar,
  type EncodedLayer,
  type TarFile,
} from '../helpers/oci-image.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

/**
 * A real Distribution (Debian docker-registry 2.8) in proxy mode in front of a real registry,
 * both on 127.0.0.1. On a cold miss the proxy answers every ranged GET with 200 and the whole
 * blob (issue 15): a lazy read through it must still succeed and take each layer from the
 * mirror once.
 */

/** The local compressed-bytes store, in memory: what the lead connects the sink to. */
class MemoryStore implements PassingBytesSink {
  private readonly blobs = new Map<string, { data: Buffer; have: Uint8Array }>();
  constructor(private readonly sizes: Map<string, number>) {}
  private entry(d: string) {
    let e = this.blobs.get(d);
    if (!e) {
      const n = this.sizes.get(d)!;
      e = { data: Buffer.alloc(n), have: new Uint8Array(n) };
      this.blobs.set(d, e);
    }
    return e;
  }
  onPassingBytes(d: string, off: number, buf: Buffer): void {
    const e = this.entry(d);
    buf.copy(e.data, off);
    e.have.fill(1, off, off + buf.length);
  }
  readPassed(d: string, off: number, len: number): Promise<Buffer | undefined> {
    const e = this.blobs.get(d);
    if (!e || e.have.subarray(off, off + len).includes(0)) return Promise.resolve(undefined);
    return Promise.resolve(e.data.subarray(off, off + len));
  }
}

function files(prefix: string, n: number, size: number): TarFile[] {
  return Array.from({ length: n }, (_, i) => ({ path: `${prefix}/f${i}.bin`, content: randomBytes(size) }));
}

describe('lazy reads through a docker-registry pull-through cache', () => {
  let origin: TestRegistry;
  let proxy: TestRegistry;
  // FLEET_SCALE=n multiplies the layer sizes (README figures); the test itself runs at 1
  const scale = Math.max(1, Number(process.env.FLEET_SCALE ?? 1));
  const layerFiles = [files('app', 40, 64 * 1024), files('models', 12 * scale, 512 * 1024)];

  beforeAll(async () => {
    origin = await startRegistry();
    proxy = await startRegistry({ proxyRemoteUrl: origin.url });
  });
  afterAll(async () => {
    await proxy?.stop();
    await origin?.stop();
  });

  const pushed = new Map<string, EncodedLayer[]>();

  async function lazyRead(repo: string, hosts: HostsConfig, label: string) {
    let layers = pushed.get(repo);
    if (!layers) {
      layers = await Promise.all(layerFiles.map(async (f) => encodeLayer(await makeTar(f), 'estargz')));
      await buildAndPushImage({ registry: origin.host, repo, tag: '1', layers });
      pushed.set(repo, layers);
    }
    const ref = parseReference(`${origin.host}/${repo}:1`);
    const client = new RegistryClient({ hosts, retry: { maxRetries: 1, minWaitMs: 5 } });
    const transport = new Transport({
      retry: retryPolicy({ maxRetries: 2, minWaitMs: 5 }),
      requestTimeoutMs: 30_000,
    });
    const sizes = new Map(layers!.map((l) => [l.descriptor.digest, l.blob.length]));
    const shared = new RangeFetchShared({ sink: new MemoryStore(sizes) });
    const started = process.hrtime.bigint();
    try {
      const image = await client.resolveImage(ref);
      for (const [i, d] of image.layers.entries()) {
        const src = new RegistryBlobReader({
          transport,
          shared,
          endpoints: resolveEndpoints(ref, hosts),
          ref: ref.toString(),
          digest: d.digest,
          size: d.size,
          fetchTimeoutMs: 60_000,
        });
        const index = await openLayer(src, { expectedTocDigest: layers![i]!.tocDigest });
        // what a container start reads: a few files, parts of others
        for (const f of layerFiles[i]!.filter((_, k) => k % 5 === 0)) {
          const node = lookupPath(index, f.path)!;
          expect(node).toBeDefined();
          const got = await readFileRange(src, index, node, 0, 100_000);
          expect(got.equals((f.content as Buffer).subarray(0, 100_000))).toBe(true);
        }
      }
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      const layerBytes = layers!.reduce((n, l) => n + l.blob.length, 0);
      return { traffic: shared.traffic(), layerBytes, ms, label, shared };
    } finally {
      await client.close();
      await transport.close();
    }
  }

  it('cold mirror: succeeds, each layer leaves the mirror once (<= 1.2x), ?ns= reaches the mirror', async () => {
    const hosts: HostsConfig = {
      [origin.host]: {
        mirrors: [{ host: proxy.host, headers: { 'X-Dragonfly-Registry': `http://${origin.host}` } }],
      },
    };
    const direct = await lazyRead('fleet/direct', {}, 'direct');
    const viaMirror = await lazyRead('fleet/mirrored', hosts, 'mirror');
    const mirrorBytes = viaMirror.traffic[proxy.url]?.bytes ?? 0;
    const originBytes = viaMirror.traffic[origin.url]?.bytes ?? 0;
    // figures for the README (bytes are asserted, times only reported)
    console.log(
      JSON.stringify({
        layerBytes: viaMirror.layerBytes,
        direct: { ms: Math.round(direct.ms), bytes: direct.traffic[origin.url]?.bytes },
        mirror: { ms: Math.round(viaMirror.ms), mirrorBytes, originBytes },
        profiles: viaMirror.shared.rangeProfiles(),
      }),
    );
    expect(mirrorBytes).toBeGreaterThan(0);
    expect(mirrorBytes).toBeLessThanOrEqual(1.2 * viaMirror.layerBytes);
    expect(originBytes).toBe(0);
    expect(viaMirror.shared.rangeProfiles()[proxy.url]!.mode).toBe('ignores-range');
    // the mirror's access log shows the upstream query on blob requests
    const blobLines = proxy.log.filter((l) => l.includes('/v2/fleet/mirrored/blobs/'));
    expect(blobLines.length).toBeGreaterThan(0);
    expect(blobLines.every((l) => l.includes(`ns=${encodeURIComponent(origin.host)}`))).toBe(true);

    // warm mirror (a node starting the same image later: new process, the proxy has the blobs)
    const warm = await lazyRead('fleet/mirrored', hosts, 'warm');
    const warmBytes = warm.traffic[proxy.url]?.bytes ?? 0;
    console.log(
      JSON.stringify({
        warm: { ms: Math.round(warm.ms), mirrorBytes: warmBytes, profiles: warm.shared.rangeProfiles() },
      }),
    );
    expect(warmBytes).toBeLessThanOrEqual(1.2 * warm.layerBytes);
    expect(warm.traffic[origin.url]?.bytes ?? 0).toBe(0);
  });

  it('ranged_reads = "split": cold mirror streams each layer once, the reads it has not reached yet go to the origin', async () => {
    const hosts: HostsConfig = {
      [origin.host]: { mirrors: [{ host: proxy.host, rangedReads: 'split' }] },
    };
    const r = await lazyRead('fleet/split', hosts, 'split');
    const mirrorBytes = r.traffic[proxy.url]?.bytes ?? 0;
    const originBytes = r.traffic[origin.url]?.bytes ?? 0;
    console.log(
      JSON.stringify({ split: { ms: Math.round(r.ms), mirrorBytes, originBytes, layerBytes: r.layerBytes } }),
    );
    expect(mirrorBytes).toBeLessThanOrEqual(1.2 * r.layerBytes);
    expect(originBytes).toBeLessThan(r.layerBytes);
  });

  it('ranged_reads = "next-host": the mirror serves manifests and config, range reads go to the origin', async () => {
    const hosts: HostsConfig = {
      [origin.host]: { mirrors: [{ host: proxy.host, rangedReads: 'next-host' }] },
    };
    const before = proxy.log.length;
    const r = await lazyRead('fleet/nexthost', hosts, 'next-host');
    const originBytes = r.traffic[origin.url]?.bytes ?? 0;
    console.log(
      JSON.stringify({ nextHost: { ms: Math.round(r.ms), originBytes, layerBytes: r.layerBytes } }),
    );
    expect(r.traffic[proxy.url]).toBeUndefined();
    expect(originBytes).toBeGreaterThan(0);
    expect(originBytes).toBeLessThan(r.layerBytes);
    const lines = proxy.log.slice(before);
    expect(lines.some((l) => l.includes('/v2/fleet/nexthost/manifests/'))).toBe(true);
    expect(
      lines.some((l) => /\/v2\/fleet\/nexthost\/blobs\/\S+ HTTP\/1\.1" 20[06]/.test(l) && l.includes('GET')),
    ).toBe(true); // the config blob (RegistryClient) comes from the mirror
  });
});
