import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import {
  pushImage,
  pushManifest,
  sha256,
  DOCKER_LIST,
  OCI_INDEX,
  type PushTarget,
  type PushedImage,
} from '../helpers/push.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

const TOC_ANN = 'containerd.io/snapshot/stargz/toc.digest';
const ZSTD_ANN = 'io.containers.zstd-chunked.manifest-checksum';

describe('multi-platform indexes on a real docker-registry', () => {
  let reg: TestRegistry;
  let t: PushTarget;
  let amd: PushedImage;
  let arm: PushedImage;
  let armv7: PushedImage;
  let indexDigest: string;
  const shared = randomBytes(300);
  const armOnly = randomBytes(400);
  const armToc = sha256('arm toc json');
  const armZstd = sha256('arm zstd manifest');

  beforeAll(async () => {
    reg = await startRegistry();
    t = { url: reg.url };
    amd = await pushImage(t, 'multi/app', 'amd64', [{ data: shared }, { data: randomBytes(500) }]);
    arm = await pushImage(
      t,
      'multi/app',
      'arm64',
      [
        { data: shared },
        { data: armOnly, annotations: { [TOC_ANN]: armToc } },
        { data: randomBytes(200), annotations: { [ZSTD_ANN]: armZstd } },
      ],
      { architecture: 'arm64', variant: 'v8' },
    );
    armv7 = await pushImage(t, 'multi/app', 'armv7', [{ data: randomBytes(100) }], {
      architecture: 'arm',
      variant: 'v7',
    });
    const desc = (p: PushedImage, platform: Record<string, string>) => ({
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      digest: p.manifestDigest,
      size: p.manifestBytes.length,
      platform,
    });
    indexDigest = await pushManifest(
      t,
      'multi/app',
      'latest',
      {
        schemaVersion: 2,
        mediaType: OCI_INDEX,
        manifests: [
          desc(amd, { os: 'linux', architecture: 'amd64' }),
          desc(armv7, { os: 'linux', architecture: 'arm', variant: 'v7' }),
          desc(arm, { os: 'linux', architecture: 'arm64', variant: 'v8' }),
        ],
      },
      OCI_INDEX,
    );
  });
  afterAll(async () => {
    await reg?.stop();
  });

  it('finds a layer that exists only in the arm64 manifest (by digest and by TOC digest)', async () => {
    const client = new RegistryClient({ platforms: ['linux/amd64'] });
    try {
      const ref = parseReference(`${reg.host}/multi/app:latest`);
      const byDigest = await client.findLayer(ref, sha256(armOnly));
      expect(byDigest.matchedBy).toBe('blob');
      expect(byDigest.layerIndex).toBe(1);
      expect(byDigest.image.manifestDigest).toBe(arm.manifestDigest);
      expect(byDigest.image.platform).toMatchObject({ os: 'linux', architecture: 'arm64' });
      expect(byDigest.image.diffIDs[1]).toBe(sha256(armOnly));
      expect(byDigest.image.index?.digest).toBe(indexDigest);
      expect(byDigest.image.index?.manifests).toHaveLength(3);

      const byToc = await client.findLayer(ref, armToc);
      expect(byToc.matchedBy).toBe('toc');
      expect(byToc.descriptor.digest).toBe(sha256(armOnly));
      const byZstd = await client.findLayer(ref, armZstd);
      expect(byZstd.matchedBy).toBe('toc');
      expect(byZstd.layerIndex).toBe(2);

      // a layer of the host platform is found in the host platform's manifest
      const sharedHit = await client.findLayer(ref, sha256(shared));
      expect(sharedHit.image.manifestDigest).toBe(amd.manifestDigest);

      await expect(client.findLayer(ref, sha256('absent'))).rejects.toMatchObject({ code: 'E_NOT_FOUND' });
    } finally {
      await client.close();
    }
  });

  it('selects platforms with normalisation and variants, and reports a missing one', async () => {
    const client = new RegistryClient({ platforms: ['linux/x86_64'] });
    try {
      const ref = parseReference(`${reg.host}/multi/app:latest`);
      expect((await client.resolveImage(ref)).manifestDigest).toBe(amd.manifestDigest);
      expect((await client.resolveImage(ref, { platform: 'linux/aarch64' })).manifestDigest).toBe(
        arm.manifestDigest,
      );
      expect((await client.resolveImage(ref, { platform: 'linux/arm64/v8' })).manifestDigest).toBe(
        arm.manifestDigest,
      );
      // arm v7 hosts run v7 (and older) images
      expect((await client.resolveImage(ref, { platform: 'linux/arm/v7' })).manifestDigest).toBe(
        armv7.manifestDigest,
      );
      await expect(client.resolveImage(ref, { platform: 'linux/arm/v6' })).rejects.toMatchObject({
        code: 'E_PLATFORM_NOT_FOUND',
      });
      await expect(client.resolveImage(ref, { platform: 'linux/s390x' })).rejects.toMatchObject({
        code: 'E_PLATFORM_NOT_FOUND',
      });
      const all = await client.resolveAllPlatforms(ref);
      expect(all.map((i) => i.manifestDigest)).toEqual([
        amd.manifestDigest,
        armv7.manifestDigest,
        arm.manifestDigest,
      ]);
    } finally {
      await client.close();
    }
  });

  it('walks nested indexes and docker manifest lists', async () => {
    const inner = await pushManifest(
      t,
      'multi/app',
      'inner',
      {
        schemaVersion: 2,
        mediaType: DOCKER_LIST,
        manifests: [
          {
            mediaType: 'application/vnd.oci.image.manifest.v1+json',
            digest: arm.manifestDigest,
            size: arm.manifestBytes.length,
            platform: { os: 'linux', architecture: 'arm64' },
          },
        ],
      },
      DOCKER_LIST,
    );
    const innerBytes = (
      await (
        await fetch(`${reg.url}/v2/multi/app/manifests/${inner}`, { headers: { accept: DOCKER_LIST } })
      ).arrayBuffer()
    ).byteLength;
    await pushManifest(
      t,
      'multi/app',
      'nested',
      {
        schemaVersion: 2,
        mediaType: OCI_INDEX,
        manifests: [{ mediaType: DOCKER_LIST, digest: inner, size: innerBytes }],
      },
      OCI_INDEX,
    );
    const client = new RegistryClient({ platforms: ['linux/arm64'] });
    try {
      const img = await client.resolveImage(parseReference(`${reg.host}/multi/app:nested`));
      expect(img.manifestDigest).toBe(arm.manifestDigest);
      const found = await client.findLayer(parseReference(`${reg.host}/multi/app:nested`), armToc);
      expect(found.image.manifestDigest).toBe(arm.manifestDigest);
    } finally {
      await client.close();
    }
  });
});
