import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import { pushImage, type PushedImage } from '../helpers/push.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { makeTestPki, type TestPki } from '../helpers/tls.js';

describe('TLS registries with a test CA', () => {
  let pki: TestPki;
  let reg: TestRegistry;
  let mtls: TestRegistry;
  let img: PushedImage;
  let img2: PushedImage;
  const layer = randomBytes(120_000);

  beforeAll(async () => {
    pki = await makeTestPki();
    reg = await startRegistry({ tls: { certificate: pki.serverCert, key: pki.serverKey } });
    mtls = await startRegistry({
      tls: { certificate: pki.serverCert, key: pki.serverKey, clientCas: [pki.caCert] },
    });
    img = await pushImage({ url: reg.url, ca: pki.caPem }, 'tls/app', 'v1', [{ data: layer }]);
    const cert = await readFile(pki.clientCert, 'utf8');
    const key = await readFile(pki.clientKey, 'utf8');
    img2 = await pushImage({ url: mtls.url, ca: pki.caPem, cert, key }, 'tls/app', 'v1', [{ data: layer }]);
  });
  afterAll(async () => {
    await reg?.stop();
    await mtls?.stop();
    await pki?.cleanup();
  });

  it('refuses an untrusted certificate at once (typed error, no retries)', async () => {
    const client = new RegistryClient({ hosts: { [reg.host]: { scheme: 'https' } } });
    try {
      const t0 = Date.now();
      const err = await client
        .resolveImage(parseReference(`${reg.host}/tls/app:v1`))
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'E_REGISTRY_NETWORK' });
      expect((err as Error).message).toMatch(/TLS/);
      expect(Date.now() - t0).toBeLessThan(2000);
    } finally {
      await client.close();
    }
  });

  it('trusts a configured CA file (added to the system roots)', async () => {
    const client = new RegistryClient({ hosts: { [reg.host]: { caFiles: [pki.caCert] } } });
    try {
      const ref = parseReference(`${reg.host}/tls/app:v1`);
      expect((await client.resolveImage(ref)).manifestDigest).toBe(img.manifestDigest);
      const blob = await client.openBlob(ref, img.layers[0]!.digest);
      expect((await blob.read(1000, 100_000)).equals(layer.subarray(1000, 101_000))).toBe(true);
    } finally {
      await client.close();
    }
  });

  it('presents a client certificate to a registry that requires one', async () => {
    const ref = parseReference(`${mtls.host}/tls/app:v1`);
    const without = new RegistryClient({
      hosts: { [mtls.host]: { caFiles: [pki.caCert] } },
      retry: { maxRetries: 1, minWaitMs: 1 },
    });
    const withCert = new RegistryClient({
      hosts: { [mtls.host]: { caFiles: [pki.caCert], certFile: pki.clientCert, keyFile: pki.clientKey } },
    });
    try {
      const err = await without.resolveImage(ref).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'E_REGISTRY_NETWORK' });
      expect((await withCert.resolveImage(ref)).manifestDigest).toBe(img2.manifestDigest);
    } finally {
      await without.close();
      await withCert.close();
    }
  });

  it('reports unreadable TLS files as E_CONFIG', async () => {
    const client = new RegistryClient({ hosts: { [reg.host]: { caFiles: ['/nonexistent/ca.pem'] } } });
    try {
      await expect(client.resolveImage(parseReference(`${reg.host}/tls/app:v1`))).rejects.toMatchObject({
        code: 'E_CONFIG',
      });
    } finally {
      await client.close();
    }
  });
});
