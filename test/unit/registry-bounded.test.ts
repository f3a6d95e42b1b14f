import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Lru } from '../../src/util/lru.js';
import { MemoryCredentialProvider, RegistryClient, parseReference } from '../../src/registry/index.js';
import { startFaultServer, type FaultServer } from '../helpers/fault-server.js';
import { sha256 } from '../helpers/push.js';

/** Finding 3 (registry side): caches keyed by names a long-running node keeps seeing stay bounded. */
describe('bounded name-keyed caches', () => {
  it('Lru drops the least recent beyond its bound and sweeps expired entries as new ones arrive', () => {
    let now = 1000;
    const m = new Lru<string, number>({ maxEntries: 100, now: () => now });
    for (let i = 0; i < 1000; i++) m.set(`k${i}`, i);
    expect(m.size).toBe(100);
    expect(m.get('k0')).toBeUndefined();
    expect(m.get('k999')).toBe(999);
    // re-setting a key makes it the newest
    m.set('k900', 1);
    for (let i = 0; i < 99; i++) m.set(`n${i}`, i);
    expect(m.get('k900')).toBe(1);

    const e = new Lru<string, number>({ maxEntries: 10_000, now: () => now });
    for (let i = 0; i < 5000; i++) {
      e.set(`t${i}`, i, now + 10);
      now += 1;
    }
    // everything older than 10 ms was swept on the way: never thousands of dead entries
    expect(e.size).toBeLessThan(200);
    expect(e.get(`t4999`)).toBe(4999);
    now += 100;
    expect(e.get(`t4999`)).toBeUndefined();
  });

  it('helper-channel credentials keep the most recent references only', async () => {
    const mem = new MemoryCredentialProvider();
    for (let i = 0; i < 6000; i++) {
      mem.addCredentials({ [`reg.example/app${i}:latest`]: { username: 'u', password: `p${i}` } });
    }
    expect(mem.size).toBeLessThanOrEqual(4096);
    const q = (i: number) => ({
      host: 'reg.example',
      repository: `app${i}`,
      ref: `reg.example/app${i}:latest`,
      isUpstream: true,
    });
    expect(await mem.get(q(5999))).toEqual({ username: 'u', password: 'p5999' });
    expect(await mem.get(q(0))).toBeUndefined();
  });

  describe('tag answers of the registry client', () => {
    let srv: FaultServer;
    const config = Buffer.from(JSON.stringify({ rootfs: { type: 'layers', diff_ids: [] } }));
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: {
          mediaType: 'application/vnd.oci.image.config.v1+json',
          digest: sha256(config),
          size: config.length,
        },
        layers: [],
      }),
    );
    const TAGS = 300;
    beforeAll(async () => {
      const manifests: Record<string, { body: Buffer; mediaType: string }> = {};
      for (let i = 0; i < TAGS; i++) {
        manifests[`repo:t${i}`] = { body: manifest, mediaType: 'application/vnd.oci.image.manifest.v1+json' };
      }
      srv = await startFaultServer({ blobs: { [sha256(config)]: config }, manifests });
    });
    afterAll(async () => {
      await srv?.stop();
    });

    it('expired tag answers do not pile up', async () => {
      // expiry follows the wall clock (Date): move it instead of sleeping past the TTL
      vi.useFakeTimers({ toFake: ['Date'] });
      const c = new RegistryClient({ tagTtlMs: 5 });
      try {
        for (let i = 0; i < TAGS; i++) {
          await c.resolveImage(parseReference(`${srv.host}/repo:t${i}`));
          if (i % 50 === 0) vi.setSystemTime(Date.now() + 10);
        }
        vi.setSystemTime(Date.now() + 10);
        await c.resolveImage(parseReference(`${srv.host}/repo:t0`));
        expect(c.cacheSizes().tags).toBeLessThan(TAGS / 2);
      } finally {
        vi.useRealTimers();
        await c.close();
      }
    });
  });
});
