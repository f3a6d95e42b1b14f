/**
 * The fetch engine against a real HTTP registry endpoint (the fault server, no faults): many
 * concurrent on-demand reads while prefetch and the background fetch + DiffID check run, with a
 * local compressed-bytes store plugged into the engine's seam. The registry sees exact,
 * pairwise disjoint ranges whose sum is the blob size: every compressed byte fetched once.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import { parseRange, useBlobServer } from '../helpers/blob-server.js';
import { buildFixture, MemoryLocalBytes, mixedSpecs, sha256 } from '../unit/layer-fixture.js';
import { parseDigest } from '../../src/util/digest.js';

describe.each(['gzip', 'zstd'] as const)(
  'engine over a registry (%s): every byte fetched once',
  (compression) => {
    const fx = buildFixture(mixedSpecs(16 * 1024), compression);
    const digest = sha256(fx.blob);

    const env = useBlobServer({ [digest]: fx.blob }, 'engine-once-');

    it('on-demand reads, prefetch and background share spans: disjoint exact ranges, sum = blob', async () => {
      const client = new RegistryClient({ maxRangesPerRequest: 16 });
      const cache = await ChunkCache.open({ root: join(env.root, compression), minFreeBytes: 0 });
      const local = new MemoryLocalBytes(fx.blob.length);
      try {
        const reader = await client.openBlob(
          parseReference(`${env.srv.host}/once/repo:t`),
          parseDigest(digest),
        );
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

        const ranges = env.srv
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
