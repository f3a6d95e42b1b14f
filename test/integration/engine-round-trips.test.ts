/**
 * Round trips of on-demand reads against a real HTTP registry endpoint (the fault server, no
 * faults), for a layer of many small files each in its own zstd frame (zstd:chunked) or gzip
 * member (eStargz): a start-up walking through its modules in blob order must cost a handful of
 * requests (read-around, widened while the walk goes on), not one per file, and every compressed
 * byte is still fetched at most once (disjoint ranges).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { RegistryClient, parseReference } from '../../src/registry/index.js';
import { parseDigest } from '../../src/util/digest.js';
import { parseRange, useBlobServer } from '../helpers/blob-server.js';
import { buildFixture, MemoryLocalBytes, sha256, type FixtureFileSpec } from '../unit/layer-fixture.js';

const FILES = 240;

function smallFiles(): FixtureFileSpec[] {
  // 1-3 KiB of incompressible bytes each: ~480 KiB of compressed data in 240 frames / members
  return Array.from({ length: FILES }, (_, i) => ({
    path: `mod${String(i).padStart(3, '0')}.py`,
    content: randomBytes(1024 + ((i * 977) % 2048)),
    chunkSize: 64 * 1024,
  }));
}

describe.each(['zstd', 'gzip'] as const)('on-demand round trips (%s, one frame per file)', (compression) => {
  const fx = buildFixture(smallFiles(), compression);
  const digest = parseDigest(sha256(fx.blob));

  const env = useBlobServer({ [digest]: fx.blob }, 'engine-rt-');

  async function withLayer(name: string, fn: (layer: LazyLayer) => Promise<void>): Promise<void> {
    const client = new RegistryClient({ maxRangesPerRequest: 16 });
    const cache = await ChunkCache.open({ root: join(env.root, compression, name), minFreeBytes: 0 });
    const local = new MemoryLocalBytes(fx.blob.length);
    try {
      const reader = await client.openBlob(parseReference(`${env.srv.host}/rt/repo:t`), digest);
      const layer = new LazyLayer({
        index: fx.index,
        source: reader,
        cache,
        layerKey: digest,
        scheduler: new FetchScheduler({ quietMs: 0, bandwidthBytesPerSec: 0 }),
        prefetch: false,
        backgroundFetch: false,
        // read-around bytes are kept here (without a local store there is no read-around)
        local,
      });
      // the plan (the chunks in blob order) exists once the layer is started
      layer.start();
      await layer.whenPrefetched();
      await fn(layer);
      await layer.close();
      // every byte the registry sent reached the local store at most once
      const count = new Uint8Array(fx.blob.length);
      for (const r of local.received) for (let i = 0; i < r.data.length; i++) count[r.offset + i]!++;
      expect(count.every((n) => n <= 1)).toBe(true);
    } finally {
      await cache.close();
      await client.close();
    }
  }

  function blobRanges(from: number): Array<{ start: number; end: number }> {
    return env.srv
      .blobGets()
      .slice(from)
      .flatMap((q) => parseRange(q.headers.range));
  }

  it('a walk through every file in blob order: a few requests, each byte at most once', async () => {
    const before = env.srv.blobGets().length;
    await withLayer('walk', async (layer) => {
      for (const [path, content] of fx.files) {
        const got = await layer.read(fx.nodes.get(path)!, 0, content.length);
        expect(got.equals(content)).toBe(true);
      }
    });
    const requests = env.srv.blobGets().length - before;
    // 128 KiB, then 256 KiB, 512 KiB, 1 MiB windows cover the ~480 KiB of frames
    expect(requests).toBeLessThanOrEqual(5);
    expect(requests).toBeGreaterThan(0);
    const ranges = blobRanges(before).sort((a, b) => a.start - b.start);
    for (let i = 1; i < ranges.length; i++)
      expect(ranges[i]!.start).toBeGreaterThanOrEqual(ranges[i - 1]!.end);
    expect(ranges.reduce((n, r) => n + (r.end - r.start), 0)).toBeLessThanOrEqual(fx.blob.length);
  });

  it('every file read at once (as the kernel sends them): one turn of the event loop, few requests', async () => {
    const before = env.srv.blobGets().length;
    await withLayer('burst', async (layer) => {
      await Promise.all(
        [...fx.files].map(async ([path, content]) => {
          const got = await layer.read(fx.nodes.get(path)!, 0, content.length);
          expect(got.equals(content)).toBe(true);
        }),
      );
    });
    const ranges = blobRanges(before).sort((a, b) => a.start - b.start);
    // the reads of one turn share one coalesced fetch (a multi-range request at most)
    expect(env.srv.blobGets().length - before).toBe(1);
    for (let i = 1; i < ranges.length; i++)
      expect(ranges[i]!.start).toBeGreaterThanOrEqual(ranges[i - 1]!.end);
  });

  it('reads scattered over the blob: read-around never fetches a byte twice', async () => {
    const before = env.srv.blobGets().length;
    const paths = [...fx.files.keys()];
    await withLayer('scatter', async (layer) => {
      // every 7th file, then every file backwards: later reads land in earlier read-around
      for (let i = 0; i < paths.length; i += 7) {
        const p = paths[i]!;
        expect((await layer.read(fx.nodes.get(p)!, 0, 1 << 20)).equals(fx.files.get(p)!)).toBe(true);
      }
      for (const p of [...paths].reverse()) {
        expect((await layer.read(fx.nodes.get(p)!, 0, 1 << 20)).equals(fx.files.get(p)!)).toBe(true);
      }
    });
    const ranges = blobRanges(before).sort((a, b) => a.start - b.start);
    for (let i = 1; i < ranges.length; i++)
      expect(ranges[i]!.start).toBeGreaterThanOrEqual(ranges[i - 1]!.end);
    expect(env.srv.blobGets().length - before).toBeLessThan(FILES / 4);
  });
});
