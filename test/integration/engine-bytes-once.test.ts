/**
 * The fetch engine against a real HTTP registry endpoint (the fault server, no faults): many
 * concurrent on-demand reads while prefetch and the background fetch + DiffID check run, with a
 * local compressed-bytes store plugged into the engine's seam. The registry sees exact,
 * pairwise disjoint ranges whose sum is the blob size: every compressed byte fetched once.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import { startFaultServer, type FaultServer } from '../helpers/fault-server.js';
import { buildFixture, MemoryLocalBytes, mixedSpecs, sha256 } from '../unit/layer-fixture.js';
import { parseDigest } from '../../src/util/digest.js';

function parseRange(h: string | string[] | undefined): Array<{ start: number; end: number }> {
  const v = Array.isArray(h) ? h[0] : h;
  expect(v).toMatch(/^bytes=/);
  return v!
    .slice('bytes='.length)
    .split(',')
    .map((p) => {
      const [a, b] = p.split('-').map(Number);
      return { start: a!, end: b! + 1 };
    });
}

describe.each(['gzip', 'zstd'] as const)(
  'engine over a registry (%s): every byte fetched once',
  (compression) => {
    let srv: FaultServer;
    let root: string;
    const fx = buildFixture(mixedSpecs(16 * 1024), compression);
    const digest = sha256(fx.blob);

    beforeAll(async () => {
      srv = await startFaultServer({ blobs: { [digest]: fx.blob } });
      root = await mkdtemp(join(tmpdir(), 'engine-once-'));
    });
    afterAll(async () => {
      await srv?.stop();
      await rm(root, { recursive: true, force: true });
    });

    it('on-demand reads, prefetch and background share spans: disjoint exact ranges, sum = blob', async () => {
      const client = new RegistryClient({ maxRangesPerRequest: 16 });
      const cache = await ChunkCache.open({ root: join(root, compression), minFreeBytes: 0 });
      const local = new MemoryLocalBytes(fx.blob.length);
      try {
        const reader = await client.openBlob(parseReference(`${srv.host}/once/repo:t`), parseDigest(digest));
        const big = fx.nodes.get('big')!;
        const layer = new LazyLayer({
          index: { ...fx.index, prefetch: { kind: 'landmark', end: big.chunks[3]!.compressedOffset } },
          source: reader,
          cache,
          layerKey: digest,
          expectedDiffID: fx.diffID,
          scheduler: new FetchScheduler({ quietMs: 0, bandwidthBytesPerSec: 0 }),
          backgroundUnitBytes: 8192,
          local,
        });
        layer.start();
        // 4 rounds of every file read concurrently, racing the prefetch and the background pass
        for (let round = 0; round < 4; round++) {
          await Promise.all(
            [...fx.files].map(async ([path, content]) => {
              const got = await layer.read(fx.nodes.get(path)!, 0, content.length);
              expect(got.equals(content)).toBe(true);
            }),
          );
        }
        await layer.whenBackgroundDone();
        expect(layer.state()).toMatchObject({ fullyVerified: true, bad: false });
        await layer.close();

        const ranges = srv
          .blobGets()
          .flatMap((q) => parseRange(q.headers.range))
          .sort((a, b) => a.start - b.start);
        for (let i = 1; i < ranges.length; i++) {
          expect(ranges[i]!.start).toBeGreaterThanOrEqual(ranges[i - 1]!.end);
        }
        const total = ranges.reduce((n, r) => n + (r.end - r.start), 0);
        expect(total).toBe(fx.blob.length);
        expect(layer.state().bytesFetched).toBe(fx.blob.length);
        local.expectEachByteOnce(fx.blob.length);
      } finally {
        await cache.close();
        await client.close();
      }
    });
  },
);
