import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { StoreSlot } from '../helpers/mounted-store.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { probe, probeOne } from '../helpers/fuse.js';
import { appImage } from '../helpers/app-image.js';
import { pushImage, sha256, startCountingProxy, type CountingProxy } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
type Errno = { errno: string; ms: number };

/**
 * Finding 1 end to end: pull (resolve + read) through a real FUSE mount and a real registry, stop
 * the registry, restart the store: cached files read fine, uncached ones fail with EIO within the
 * read deadline, and everything works again once the registry is back (nothing negative-cached).
 */
describe('store restart while the registry is down (real FUSE mount, real registry)', () => {
  let registry: TestRegistry;
  let proxy: CountingProxy;
  let dir: string;
  let mnt: string;
  const slot = new StoreSlot();
  const READ_MS = 2000;
  const small = Buffer.from('small file content\n');
  const big = randomBytes(3 << 20);

  const start = async () => {
    await slot.start({
      root: join(dir, 'root'),
      mountpoint: mnt,
      deadlines: { lookupMs: 3000, readMs: READ_MS, syntheticMs: 1000 },
      layer: { backgroundFetch: false, prefetch: false, deadlineMs: READ_MS },
    });
  };
  const stop = (): Promise<void> => slot.stop();

  beforeAll(async () => {
    registry = await startRegistry();
    proxy = await startCountingProxy(registry.host);
    dir = await mkdtemp(join(tmpdir(), 'sgz-restart-int-'));
    mnt = join(dir, 'store');
    await mkdir(mnt);
  });

  afterAll(async () => {
    await stop().catch(() => undefined);
    await proxy?.stop();
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('serves cached files without the registry, EIO for the rest, and recovers when it returns', async () => {
    const img = await appImage({ 'small.txt': small, 'big.bin': big });
    await pushImage(registry.url, 'test/restart', 'v1', img);
    const ref = `${proxy.host}/test/restart:v1`;
    const diff = join(mnt, b64(ref), img.layers[0]!.descriptor.digest, 'diff');

    await start();
    // the "pull": lookups of diff/info, and the container reads one file
    const first = await probe([
      { op: 'stat', path: diff },
      { op: 'read', path: join(diff, 'app', 'small.txt') },
    ]);
    expect(Buffer.from((first[1] as { hex: string }).hex, 'hex').equals(small)).toBe(true);
    await stop();

    proxy.down = true;
    const seen = proxy.requests.length;
    await start();
    const t0 = Date.now();
    const r = await probe([
      { op: 'stat', path: join(diff, 'app', 'small.txt') },
      { op: 'read', path: join(diff, 'app', 'small.txt') },
      { op: 'readdir', path: join(diff, 'app') },
      { op: 'read', path: join(diff, 'app', 'big.bin'), offset: 0, length: 65536 },
    ]);
    expect((r[0] as { size: number }).size).toBe(small.length);
    expect(Buffer.from((r[1] as { hex: string }).hex, 'hex').equals(small)).toBe(true);
    expect((r[2] as Array<{ name: string }>).map((e) => e.name)).toEqual(['.', '..', 'big.bin', 'small.txt']);
    expect(r[3]).toMatchObject({ errno: 'EIO' });
    expect((r[3] as Errno).ms).toBeLessThan(READ_MS + 3000);
    expect(Date.now() - t0).toBeLessThan(READ_MS + 10_000);
    // the cached part needed no registry at all: only the failed read tried it
    expect(proxy.requests.slice(seen).every((q) => q.includes('/blobs/'))).toBe(true);

    proxy.down = false;
    const again = await probeOne<{ sha256: string; length: number }>({
      op: 'sha256',
      path: join(diff, 'app', 'big.bin'),
    });
    expect(again).toEqual({ sha256: sha256(big), length: big.length });
  });
});
