import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildAndPushImage,
  busyboxLayerTar,
  encodeLayer,
  fetchManifest,
  makeTar,
  type EncodedLayer,
  type LayerEncoding,
} from '../helpers/oci-image.js';
import { mountsUnder, TestPodman } from '../helpers/podman.js';
import { access, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

/**
 * Images whose layers come from OUR writer (eStargz, zstd:chunked) — and a plain gzip control —
 * pushed with skopeo to a real registry, then pulled and run by Podman 4.3.1 the ordinary way
 * (no Additional Layer Store): the blobs must be valid gzip/zstd tar layers with correct DiffIDs.
 * Every tool (podman, skopeo, docker-registry, gzip, zstd, tar, busybox) must exist: a missing
 * one fails the suite.
 */

const CHUNK = 1 << 20;
/** 3.5 MiB: random half, text half, so several chunks of both kinds. */
const DATA = Buffer.concat([
  randomBytes(7 << 18),
  Buffer.from('the quick brown fox jumps over the lazy dog\n'.repeat(Math.ceil((7 << 18) / 44))).subarray(
    0,
    7 << 18,
  ),
]);
const DATA_SHA256 = createHash('sha256').update(DATA).digest('hex');

let registry: TestRegistry;
let podman: TestPodman;
let baseTar: Buffer;
let dataTar: Buffer;
const built = new Map<LayerEncoding, EncodedLayer[]>();

beforeAll(async () => {
  registry = await startRegistry();
  podman = await TestPodman.create({ insecureRegistries: [registry.host] });
  baseTar = await busyboxLayerTar();
  dataTar = await makeTar([
    { path: 'data/', type: 'directory' },
    { path: 'data/file', content: DATA, mode: 0o644 },
    { path: 'data/empty', content: '' },
    { path: 'data/link', type: 'symlink', linkname: 'file' },
  ]);
}, 300_000);

afterAll(async () => {
  await podman?.cleanup();
  await registry?.stop();
}, 300_000);

async function layers(encoding: LayerEncoding): Promise<EncodedLayer[]> {
  let l = built.get(encoding);
  if (!l) {
    l = [
      await encodeLayer(baseTar, encoding, { chunkSize: CHUNK }),
      await encodeLayer(dataTar, encoding, { chunkSize: CHUNK }),
    ];
    built.set(encoding, l);
  }
  return l;
}

// tests in a file run one after another (vitest 5 has no describe.sequential: it is the default)
describe('Podman pulls and runs images built with our writer', () => {
  it.each(['estargz', 'zstd:chunked', 'gzip'] as const)(
    '%s: push, pull, run sha256sum',
    async (encoding) => {
      const ls = await layers(encoding);
      const repo = `writer/${encoding.replace(':', '-')}`;
      const pushed = await buildAndPushImage({
        registry: registry.host,
        repo,
        tag: 'v1',
        layers: ls,
        cmd: ['/bin/sh', '-c', 'echo hello'],
      });
      // the registry kept our manifest: layer media types and annotations as built
      const m = await fetchManifest(registry.host, repo, 'v1');
      expect(m.digest).toBe(pushed.manifestDigest);
      const ann = m.json.layers.map((l) => l.annotations ?? {});
      if (encoding === 'estargz') {
        expect(
          m.json.layers.every((l) => l.mediaType === 'application/vnd.oci.image.layer.v1.tar+gzip'),
        ).toBe(true);
        ann.forEach((a, i) => expect(a['containerd.io/snapshot/stargz/toc.digest']).toBe(ls[i]!.tocDigest));
      } else if (encoding === 'zstd:chunked') {
        expect(
          m.json.layers.every((l) => l.mediaType === 'application/vnd.oci.image.layer.v1.tar+zstd'),
        ).toBe(true);
        ann.forEach((a, i) =>
          expect(a['io.github.containers.zstd-chunked.manifest-checksum']).toBe(ls[i]!.tocDigest),
        );
      } else {
        expect(ann.every((a) => Object.keys(a).length === 0)).toBe(true);
      }

      await podman.podmanOk(['pull', '-q', '--tls-verify=false', pushed.ref], { timeoutMs: 240_000 });
      const inspect = await podman.podmanOk([
        'image',
        'inspect',
        '--format',
        '{{json .RootFS.Layers}}',
        pushed.ref,
      ]);
      expect(JSON.parse(inspect.stdout)).toEqual(pushed.diffIDs);
      const run = await podman.podmanOk(['run', '--rm', pushed.ref, 'sha256sum', '/data/file'], {
        timeoutMs: 120_000,
      });
      expect(run.stdout.trim().split(/\s+/)[0]).toBe(DATA_SHA256);
      const ls2 = await podman.podmanOk([
        'run',
        '--rm',
        pushed.ref,
        'sh',
        '-c',
        'readlink /data/link; wc -c < /data/empty',
      ]);
      expect(ls2.stdout.split('\n').map((s) => s.trim())).toEqual(['file', '0', '']);
      await podman.podmanOk(['rmi', pushed.ref]);
    },
    600_000,
  );

  it('eStargz blobs: gzip -dc gives a tar listing stargz.index.json and the landmark', async () => {
    for (const layer of await layers('estargz')) {
      const plain = execFileSync('gzip', ['-dc'], { input: layer.blob, maxBuffer: 1 << 30 });
      expect('sha256:' + createHash('sha256').update(plain).digest('hex')).toBe(layer.diffID);
      const names = execFileSync('tar', ['-t'], { input: plain, maxBuffer: 1 << 30 })
        .toString()
        .split('\n');
      expect(names).toContain('stargz.index.json');
      expect(names).toContain('.no.prefetch.landmark');
    }
    const names = execFileSync('tar', ['-t'], {
      input: execFileSync('gzip', ['-dc'], { input: (await layers('estargz'))[1]!.blob, maxBuffer: 1 << 30 }),
    }).toString();
    expect(names).toContain('data/file');
  });

  it('zstd:chunked blobs: zstd -dc | tar -t lists the layer', async () => {
    const [base, data] = await layers('zstd:chunked');
    for (const layer of [base!, data!]) {
      const plain = execFileSync('zstd', ['-dc', '-q'], { input: layer.blob, maxBuffer: 1 << 30 });
      expect('sha256:' + createHash('sha256').update(plain).digest('hex')).toBe(layer.diffID);
      execFileSync('tar', ['-t'], { input: plain, maxBuffer: 1 << 30 });
    }
    const names = execFileSync('tar', ['-t'], {
      input: execFileSync('zstd', ['-dc', '-q'], { input: data!.blob, maxBuffer: 1 << 30 }),
    })
      .toString()
      .trim()
      .split('\n');
    expect(names).toEqual(['data/', 'data/file', 'data/empty', 'data/link']);
  });

  it('podman environments are isolated (own storage, own blob-info-cache) and cleanup leaves nothing', async () => {
    const ls = await layers('gzip');
    const pushed = await buildAndPushImage({
      registry: registry.host,
      repo: 'writer/iso',
      tag: 'v1',
      layers: ls,
    });
    const [a, b] = await Promise.all([
      TestPodman.create({ insecureRegistries: [registry.host] }),
      TestPodman.create({ insecureRegistries: [registry.host] }),
    ]);
    try {
      expect(a.dir).not.toBe(b.dir);
      await a.podmanOk(['pull', '-q', '--tls-verify=false', pushed.ref], { timeoutMs: 240_000 });
      // c/image wrote its blob-info-cache into a's private dir, and b's storage has no image
      expect(await readdir(join(a.dir, 'blob-info-cache'))).toContain('blob-info-cache-v1.boltdb');
      expect((await b.podmanOk(['images', '-q'])).stdout.trim()).toBe('');
      expect((await a.podmanOk(['images', '-q'])).stdout.trim()).not.toBe('');
      // leave a running container behind: cleanup must still remove everything
      await a.podmanOk(['run', '-d', '--name', 'sleeper', pushed.ref, 'sleep', '600']);
    } finally {
      await a.cleanup();
      await b.cleanup();
    }
    for (const env of [a, b]) {
      await expect(access(env.dir)).rejects.toThrow();
      expect(await mountsUnder(env.dir)).toEqual([]);
    }
  }, 600_000);
});
