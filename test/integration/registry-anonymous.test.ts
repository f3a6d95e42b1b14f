import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import { isStoreError } from '../../src/util/errors.js';
import {
  pushImage,
  pushManifest,
  sha256,
  DOCKER_MANIFEST,
  OCI_MANIFEST,
  type PushTarget,
  type PushedImage,
} from '../helpers/push.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

/** Blob GET log lines of the registry (its access log), to count what really went over the wire. */
function blobGets(reg: TestRegistry, digest: string): string[] {
  return reg.log.filter((l) => l.includes(`"GET /v2/`) && l.includes(`/blobs/${digest}`));
}

describe('registry client against a real docker-registry (anonymous)', () => {
  let reg: TestRegistry;
  let target: PushTarget;
  let img: PushedImage;
  let blob: Buffer;

  beforeAll(async () => {
    reg = await startRegistry();
    target = { url: reg.url };
    blob = randomBytes(1_234_567);
    img = await pushImage(target, 'anon/app', 'v1', [
      {
        data: randomBytes(1000),
        annotations: { 'containerd.io/snapshot/stargz/toc.digest': sha256('toc-0') },
      },
      { data: blob },
    ]);
  });
  afterAll(async () => {
    await reg?.stop();
  });

  it('resolves an OCI manifest by tag (Accept header sent) and verifies the config', async () => {
    const client = new RegistryClient();
    try {
      const r = await client.resolveImage(parseReference(`${reg.host}/anon/app:v1`));
      expect(r.manifestDigest).toBe(img.manifestDigest);
      expect(r.manifestDigest).toBe(sha256(r.manifestBytes));
      expect(r.configDigest).toBe(img.configDigest);
      expect(sha256(r.configBytes)).toBe(img.configDigest);
      expect(r.layers.map((l) => l.digest)).toEqual(img.layers.map((l) => l.digest));
      expect(r.layers[0]!.annotations['containerd.io/snapshot/stargz/toc.digest']).toBe(sha256('toc-0'));
      expect(r.diffIDs).toEqual(img.layers.map((l) => sha256(l.data)));
      expect(r.platform).toEqual({ os: 'linux', architecture: 'amd64' });
      expect(r.index).toBeUndefined();
    } finally {
      await client.close();
    }
  });

  it('resolves by digest and accepts docker schema2 manifests', async () => {
    const d = await pushImage(target, 'anon/docker', 'v1', [{ data: randomBytes(10) }], { docker: true });
    const client = new RegistryClient();
    try {
      const byTag = await client.resolveImage(parseReference(`${reg.host}/anon/docker:v1`));
      expect(byTag.manifest.mediaType).toBe(DOCKER_MANIFEST);
      const byDigest = await client.resolveImage(
        parseReference(`${reg.host}/anon/docker@${d.manifestDigest}`),
      );
      expect(byDigest.manifestDigest).toBe(d.manifestDigest);
    } finally {
      await client.close();
    }
  });

  it('reads exact bytes: exact ranges, the short tail, multi-range readRanges', async () => {
    const client = new RegistryClient({});
    try {
      const ref = parseReference(`${reg.host}/anon/app:v1`);
      const digest = img.layers[1]!.digest;
      const r = await client.openBlob(ref, digest, { size: blob.length });
      expect(r.size).toBe(blob.length);
      // each read fetches exactly its bytes (no block rounding, no cache: the engine shares spans)
      const a = await r.read(10, 100);
      const b = await r.read(110, 4000);
      expect(a.equals(blob.subarray(10, 110))).toBe(true);
      expect(b.equals(blob.subarray(110, 4110))).toBe(true);
      expect(r.stats().requests).toBe(2);
      expect(r.stats().bytes).toBe(4100);
      // the last bytes
      const tail = await r.read(blob.length - 7, 7);
      expect(tail.equals(blob.subarray(blob.length - 7))).toBe(true);
      // several disjoint ranges -> one multi-range request
      const before = r.stats().requests;
      const ranges = [
        { offset: 300_000, length: 10 },
        { offset: 700_123, length: 60_000 },
        { offset: 1_000_000, length: 1 },
        { offset: 700_200, length: 5 },
      ];
      const got = await r.readRanges(ranges, {});
      ranges.forEach((rg, i) =>
        expect(got[i]!.equals(blob.subarray(rg.offset, rg.offset + rg.length))).toBe(true),
      );
      expect(r.stats().requests).toBe(before + 1);
      // the whole blob in one read
      const all = await r.read(0, blob.length);
      expect(sha256(all)).toBe(digest);
      // the registry saw exactly the requests we counted (its access log line lags the response a little)
      const deadline = Date.now() + 3000;
      while (blobGets(reg, digest).length < r.stats().requests && Date.now() < deadline)
        await new Promise((res) => setTimeout(res, 20));
      expect(blobGets(reg, digest).length).toBe(r.stats().requests);
    } finally {
      await client.close();
    }
  });

  it('rejects out-of-range reads with a typed error and no request', async () => {
    const client = new RegistryClient();
    try {
      const r = await client.openBlob(parseReference(`${reg.host}/anon/app:v1`), img.layers[1]!.digest);
      await expect(r.read(blob.length - 1, 2)).rejects.toMatchObject({ code: 'E_TRUNCATED' });
      await expect(r.read(-1, 2)).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
      expect(r.stats().requests).toBe(0);
    } finally {
      await client.close();
    }
  });

  it('maps missing things to typed errors', async () => {
    const client = new RegistryClient({ retry: { maxRetries: 0 } });
    try {
      const ref = parseReference(`${reg.host}/anon/app:nope`);
      await expect(client.resolveImage(ref)).rejects.toMatchObject({ code: 'E_REGISTRY_NOT_FOUND' });
      await expect(client.openBlob(ref, sha256('nothing'))).rejects.toMatchObject({
        code: 'E_REGISTRY_NOT_FOUND',
      });
      await expect(
        client.openBlob(parseReference(`${reg.host}/anon/app:v1`), img.layers[1]!.digest, { size: 5 }),
      ).rejects.toMatchObject({
        code: 'E_REGISTRY_PROTOCOL',
      });
    } finally {
      await client.close();
    }
  });

  it('re-resolves a re-pushed tag after the tag TTL, not before', async () => {
    const one = await pushImage(target, 'anon/moving', 'latest', [{ data: randomBytes(100) }]);
    const short = new RegistryClient({ tagTtlMs: 300 });
    const long = new RegistryClient({ tagTtlMs: 60_000 });
    try {
      const ref = parseReference(`${reg.host}/anon/moving`);
      expect((await short.resolveImage(ref)).manifestDigest).toBe(one.manifestDigest);
      expect((await long.resolveImage(ref)).manifestDigest).toBe(one.manifestDigest);
      const two = await pushImage(target, 'anon/moving', 'latest', [{ data: randomBytes(100) }]);
      expect(two.manifestDigest).not.toBe(one.manifestDigest);
      await new Promise((r) => setTimeout(r, 400));
      expect((await short.resolveImage(ref)).manifestDigest).toBe(two.manifestDigest);
      expect((await long.resolveImage(ref)).manifestDigest).toBe(one.manifestDigest);
    } finally {
      await short.close();
      await long.close();
    }
  });

  it('rejects a manifest over the size cap', async () => {
    const big = { ...img.manifest, annotations: { pad: 'x'.repeat(20_000) } };
    await pushManifest(target, 'anon/app', 'big', big, OCI_MANIFEST);
    const client = new RegistryClient({ maxManifestBytes: 10_000 });
    try {
      const err = await client
        .resolveImage(parseReference(`${reg.host}/anon/app:big`))
        .catch((e: unknown) => e);
      expect(isStoreError(err, 'E_TOO_LARGE')).toBe(true);
    } finally {
      await client.close();
    }
  });
});
