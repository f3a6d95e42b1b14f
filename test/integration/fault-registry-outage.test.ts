/**
 * Issue 14, registry outage in the middle of a run (no restart): a real docker-registry behind a
 * proxy that is switched to "down" (connections dropped) and then "hang" (requests never
 * answered). Cached data keeps being served; uncached reads fail with EIO (for "hang" only the
 * store's read deadline can end them: the client's request timeout is far longer); lookups of
 * layers not yet resolved answer ENOENT; when the registry returns, everything works without a
 * restart. Probed through the real FUSE mount from another process.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { RegistryClient } from '../../src/registry/index.js';
import { createLayerStore, mountStore, type LayerStore, type StoreMount } from '../../src/store/index.js';
import { probe, probeOne } from '../helpers/fuse.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import {
  assembleImage,
  buildTestLayer,
  makeTar,
  pushImage,
  sha256,
  startCountingProxy,
  type CountingProxy,
} from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
type Timed = { errno?: string; ms?: number };

describe('registry outage while the store runs (real FUSE mount, real registry)', () => {
  let registry: TestRegistry;
  let proxy: CountingProxy;
  let dir: string;
  let mnt: string;
  let store: LayerStore | undefined;
  let mount: StoreMount | undefined;
  let cache: ChunkCache | undefined;
  let client: RegistryClient | undefined;
  // injected short deadlines; the client's own timeout is much longer so "hang" meets the deadline
  const READ_MS = 1500;
  const LOOKUP_MS = 1500;
  // longer than the deadlines, so during "hang" the deadlines are what answers
  const REQUEST_MS = 4000;
  const small = Buffer.from('small file content\n');
  const big = randomBytes(2 << 20);
  const big2 = randomBytes(2 << 20);
  const big3 = randomBytes(1 << 20);

  beforeAll(async () => {
    registry = await startRegistry();
    proxy = await startCountingProxy(registry.host);
    dir = await mkdtemp(join(tmpdir(), 'sgz-outage-'));
    mnt = join(dir, 'store');
    await mkdir(mnt);
    const root = join(dir, 'root');
    cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    client = new RegistryClient({
      retry: { maxRetries: 1, minWaitMs: 10, maxWaitMs: 50 },
      requestTimeoutMs: REQUEST_MS,
    });
    store = createLayerStore({
      root,
      registry: client,
      cache,
      // nothing negative-cached: a lookup after the outage must reach the registry again
      negativeTtlMs: 0,
      deadlines: { lookupMs: LOOKUP_MS, readMs: READ_MS, syntheticMs: 1000 },
      layer: { backgroundFetch: false, prefetch: false, deadlineMs: READ_MS },
    });
    mount = await mountStore(mnt, store, { allowOther: true });
  });

  afterAll(async () => {
    if (proxy) {
      proxy.down = false;
      proxy.hang = false;
    }
    await mount?.unmount().catch(() => undefined);
    await store?.close().catch(() => undefined);
    await cache?.close();
    await client?.close();
    await proxy?.stop();
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('serves cached data, fails uncached reads with EIO, answers lookups ENOENT, recovers', async () => {
    const layer = await buildTestLayer(
      await makeTar([
        { name: 'app/', type: 'directory' },
        { name: 'app/small.txt', content: small },
        { name: 'app/big.bin', content: big },
        { name: 'app/big2.bin', content: big2 },
        { name: 'app/big3.bin', content: big3 },
      ]),
      'estargz',
    );
    const img = assembleImage([layer]);
    await pushImage(registry.url, 'test/outage', 'v1', img);
    const digest = img.layers[0]!.descriptor.digest;
    const diff = join(mnt, b64(`${proxy.host}/test/outage:v1`), digest, 'diff');
    // the same layer under names the store has not resolved yet
    const unresolved = (tag: string) => join(mnt, b64(`${proxy.host}/test/outage:${tag}`), digest, 'diff');
    for (const tag of ['during-down', 'during-hang', 'after'])
      await pushImage(registry.url, 'test/outage', tag, img);

    // the "pull": lookups, and the container reads one file
    const first = await probe([
      { op: 'stat', path: diff },
      { op: 'read', path: join(diff, 'app', 'small.txt') },
    ]);
    expect(Buffer.from((first[1] as { hex: string }).hex, 'hex').equals(small)).toBe(true);
    let bytesChecked = small.length;

    const outage = async (mode: 'down' | 'hang', tag: string, file: string): Promise<Timed[]> => {
      proxy.down = mode === 'down';
      proxy.hang = mode === 'hang';
      const r = (await probe([
        { op: 'stat', path: join(diff, 'app', 'small.txt') },
        { op: 'read', path: join(diff, 'app', 'small.txt') },
        { op: 'readdir', path: join(diff, 'app') },
        { op: 'read', path: join(diff, 'app', file), offset: 1 << 20, length: 65536 },
        { op: 'stat', path: unresolved(tag) },
      ])) as Timed[];
      expect((r[0] as { size: number }).size).toBe(small.length);
      expect(Buffer.from((r[1] as { hex: string }).hex, 'hex').equals(small)).toBe(true);
      bytesChecked += small.length;
      expect((r[2] as Array<{ name: string }>).map((e) => e.name)).toEqual([
        '.',
        '..',
        'big.bin',
        'big2.bin',
        'big3.bin',
        'small.txt',
      ]);
      expect(r[3]!.errno, `${mode}: uncached read`).toMatch(/^(EIO|ETIMEDOUT)$/);
      expect(r[4]!.errno, `${mode}: lookup of an unresolved layer`).toBe('ENOENT');
      return r;
    };

    // 1. registry down (connections dropped): fails fast; when it returns, everything reads
    const down = await outage('down', 'during-down', 'big.bin');
    proxy.down = false;
    const back = await probeOne<{ sha256: string; length: number }>({
      op: 'sha256',
      path: join(diff, 'app', 'big.bin'),
    });
    expect(back).toEqual({ sha256: sha256(big), length: big.length });
    bytesChecked += big.length;

    // 2. registry stuck (requests never answered): only the deadlines end the operations
    const hung = await outage('hang', 'during-hang', 'big2.bin');
    console.log(
      `outage: down: read ${down[3]!.errno} in ${down[3]!.ms} ms, lookup ENOENT in ${down[4]!.ms} ms; ` +
        `hang: read ${hung[3]!.errno} in ${hung[3]!.ms} ms (deadline ${READ_MS}), lookup ENOENT in ${hung[4]!.ms} ms (deadline ${LOOKUP_MS})`,
    );
    proxy.hang = false;
    // Back again, no restart: the FIRST read of each file succeeds. The reads that gave up during
    // the hang aborted the requests nobody else waited for (layer/waiters.ts), so nothing joins a
    // request stuck on the hung connection, and no read waits for the client's request timeout.
    const t0 = Date.now();
    const firstReads = (await probe([
      { op: 'sha256', path: join(diff, 'app', 'big3.bin') },
      // big2.bin was being read when the registry hung: its span was in that stuck request
      { op: 'sha256', path: join(diff, 'app', 'big2.bin') },
    ])) as Array<{ sha256?: string; errno?: string }>;
    expect(firstReads[0]).toMatchObject({ sha256: sha256(big3) });
    expect(firstReads[1]).toMatchObject({ sha256: sha256(big2) });
    bytesChecked += big3.length + big2.length;
    console.log(`outage: after the hang, the first reads succeeded (both files in ${Date.now() - t0} ms)`);
    const after = (await probe([
      { op: 'stat', path: unresolved('after') },
      { op: 'sha256', path: join(unresolved('during-down'), 'app', 'small.txt') },
      { op: 'sha256', path: join(diff, 'app', 'big2.bin') },
    ])) as Array<Timed & { sha256?: string }>;
    expect(after[0]!.errno).toBeUndefined();
    expect(after[1]!.sha256).toBe(sha256(small));
    expect(after[2]!.sha256).toBe(sha256(big2));
    bytesChecked += small.length;
    console.log(`outage: ${bytesChecked} bytes checked, 0 wrong`);
  });
});
