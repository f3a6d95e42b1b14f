import { randomBytes, randomInt } from 'node:crypto';
import { mkdtemp, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { gzipSync } from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import {
  FetchScheduler,
  LazyLayer,
  type ByteRange,
  type LazyLayerOptions,
  type ReadRangesOptions,
} from '../../src/layer/index.js';
import type { Logger } from '../../src/util/logger.js';
import { decompressionCount } from '../../src/format/codec.js';
import { buildFixture, mixedSpecs, sha256, TestSource, type Fixture } from './layer-fixture.js';
import { closeTempCache, fixtureLayer, node, openTempCache } from './layer-harness.js';

const zstdCompress = (createRequire(import.meta.url)('zstd-napi') as { compress(b: Uint8Array): Buffer })
  .compress;

let root: string;
let cache: ChunkCache;
const layers: LazyLayer[] = [];

beforeEach(async () => ({ root, cache } = await openTempCache('layer-test-')));
afterEach(() => closeTempCache(layers, cache, root));

function makeLayer(
  fx: Fixture,
  source: TestSource,
  extra: Partial<LazyLayerOptions> = {},
  c: ChunkCache = cache,
): LazyLayer {
  const layer = fixtureLayer(fx, source, c, extra);
  layers.push(layer);
  return layer;
}

async function cachedFiles(): Promise<string[]> {
  const out: string[] = [];
  const base = join(root, 'cache', 'chunks', 'sha256');
  for (const d of await readdir(base).catch(() => [])) {
    for (const f of await readdir(join(base, d))) out.push('sha256:' + f);
  }
  return out;
}

describe.each(['gzip', 'zstd'] as const)('LazyLayer (%s)', (compression) => {
  const chunkSize = 4096;

  it('returns exactly the file bytes for random offsets and lengths, cold and warm', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source);
    for (const pass of ['cold', 'warm']) {
      for (const [path, content] of fx.files) {
        const n = node(fx, path);
        // whole file, then random slices, some past EOF
        expect((await layer.read(n, 0, content.length + 10)).equals(content), `${pass} ${path}`).toBe(true);
        for (let i = 0; i < 30; i++) {
          const off = randomInt(0, content.length + 2);
          const len = randomInt(0, chunkSize * 3);
          const got = await layer.read(n, off, len);
          expect(got.equals(content.subarray(off, off + len)), `${pass} ${path} ${off}+${len}`).toBe(true);
        }
      }
      cache.dropMemory();
    }
  });

  it('fetches all missing chunks of one read in a single coalesced request', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source);
    const big = node(fx, 'big');
    const got = await layer.read(big, 100, chunkSize * 6);
    expect(got.equals(fx.files.get('big')!.subarray(100, 100 + chunkSize * 6))).toBe(true);
    expect(source.requestCount).toBe(1);
    // chunks 0..6 are consecutive members: one range covering exactly their compressed spans
    const chunks = big.chunks.slice(0, 7);
    expect(source.requests[0]).toEqual([
      { offset: chunks[0]!.compressedOffset, length: chunks[6]!.compressedEnd - chunks[0]!.compressedOffset },
    ]);
    // a read touching cached chunk 6 and missing chunks 7, 8 fetches only the missing ones
    await layer.read(big, chunkSize * 6, chunkSize * 3);
    expect(source.requestCount).toBe(2);
    expect(source.requests[1]).toEqual([
      {
        offset: big.chunks[7]!.compressedOffset,
        length: big.chunks[8]!.compressedEnd - big.chunks[7]!.compressedOffset,
      },
    ]);
  });

  it('coalesces disjoint spans into one multi-range request (or parallel reads without readRanges)', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    for (const multiRange of [true, false]) {
      const source = new TestSource(fx.blob, { multiRange });
      const c = await ChunkCache.open({ root: await mkdtemp(join(root, 'mr-')), minFreeBytes: 0 });
      const layer = makeLayer(fx, source, {}, c);
      const big = node(fx, 'big');
      // warm chunks 1 and 3, then read 0..4: missing 0, 2, 4 are separated by cached members
      await layer.read(big, chunkSize, 1);
      await layer.read(big, chunkSize * 3, 1);
      const before = source.requestCount;
      const got = await layer.read(big, 0, chunkSize * 5);
      expect(got.equals(fx.files.get('big')!.subarray(0, chunkSize * 5))).toBe(true);
      const reqs = source.requests.slice(before);
      if (multiRange) {
        expect(reqs).toHaveLength(1);
        expect(reqs[0]).toHaveLength(3);
      } else {
        expect(reqs).toHaveLength(3);
      }
      const needed = [0, 2, 4].reduce(
        (n, i) => n + big.chunks[i]!.compressedEnd - big.chunks[i]!.compressedOffset,
        0,
      );
      expect(reqs.flat().reduce((n, r) => n + r.length, 0)).toBe(needed);
      await c.close();
    }
  });

  it('shares one fetch among concurrent reads of the same chunk', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    source.delayMs = 30;
    const layer = makeLayer(fx, source);
    const big = node(fx, 'big');
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => layer.read(big, i * 10, 100)));
    results.forEach((r, i) =>
      expect(r.equals(fx.files.get('big')!.subarray(i * 10, i * 10 + 100))).toBe(true),
    );
    expect(source.requestCount).toBe(1);
  });

  it('a read returns bytes of its own; a transient read may return a view the cache releases later', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const layer = makeLayer(fx, new TestSource(fx.blob));
    const big = node(fx, 'big');
    const want = fx.files.get('big')!.subarray(100, 1100);
    await layer.read(big, 0, 10); // chunk 0 decoded into the memory LRU
    const own = await layer.read(big, 100, 1000);
    const view = await layer.read(big, 100, 1000, { transient: true });
    expect(own.equals(want)).toBe(true);
    expect(view.equals(want)).toBe(true); // what a FUSE answer copies in this turn
    await cache.flush();
    cache.dropMemory(); // chunk 0 leaves the LRU: its buffer is released at the next turn
    await new Promise<void>((r) => setImmediate(r));
    expect(view.length).toBe(0);
    expect(own.equals(want)).toBe(true);
  });

  it('a transient read copied from several chunks is released at the next turn; an own one stays', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const layer = makeLayer(fx, new TestSource(fx.blob));
    const big = node(fx, 'big');
    // over 32 KiB: a buffer of its own, not a slice of Node's allocation pool (never released)
    const want = fx.files.get('big')!.subarray(100, 34_100);
    const view = await layer.read(big, 100, 34_000, { transient: true });
    const own = await layer.read(big, 100, 34_000);
    expect(view.equals(want)).toBe(true); // what a FUSE answer copies in this turn
    await new Promise<void>((r) => setImmediate(r));
    expect(view.length).toBe(0);
    expect(own.equals(want)).toBe(true);
    // the chunks it was copied from are untouched
    expect((await layer.read(big, 100, 34_000, { transient: true })).equals(want)).toBe(true);
  });

  it('a read waiting for several chunks holds the early ones: released only once it is done', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source);
    const big = node(fx, 'big');
    const content = fx.files.get('big')!;
    await layer.read(big, 0, 10); // chunk 0 in memory (and on disk), chunk 1 not fetched yet
    await cache.flush();
    const chunk0 = cache.getMemory(big.chunks[0]!.digest)!;
    let open!: () => void;
    source.gate = new Promise<void>((r) => (open = r));
    const reading = layer.read(big, chunkSize - 100, 200); // chunks 0 and 1: waits on chunk 1
    await new Promise<void>((r) => setImmediate(r));
    cache.dropMemory(); // chunk 0 leaves the LRU while the read holds its buffer
    await new Promise<void>((r) => setImmediate(r));
    expect(chunk0.length).toBe(chunkSize); // borrowed: not released under the read
    open();
    expect((await reading).equals(content.subarray(chunkSize - 100, chunkSize + 100))).toBe(true);
    await new Promise<void>((r) => setImmediate(r));
    expect(chunk0.length).toBe(0); // given back, then released
  });

  it('serves zero chunks without fetching and checks their digest', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source);
    const sparse = node(fx, 'sparse');
    expect(sparse.chunks.filter((c) => c.zeros)).toHaveLength(2);
    const got = await layer.read(sparse, chunkSize, chunkSize * 2);
    expect(got.equals(Buffer.alloc(chunkSize * 2))).toBe(true);
    expect(source.requestCount).toBe(0);
    // a zeros chunk whose digest is not that of zeros is rejected
    sparse.chunks[1]!.digest = sha256(Buffer.from('not zeros'));
    const layer2 = makeLayer(fx, source);
    await expect(layer2.read(sparse, chunkSize, 10)).rejects.toMatchObject({ code: 'E_DIGEST_MISMATCH' });
  });

  it('a corrupted chunk fails only the reads touching it and is never cached', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const big = node(fx, 'big');
    const bad = big.chunks[4]!;
    // flip a byte in the middle of the compressed member
    source.corrupt.add((bad.compressedOffset + bad.compressedEnd) >> 1);
    const layer = makeLayer(fx, source);
    const content = fx.files.get('big')!;
    for (let i = 0; i < big.chunks.length; i++) {
      const c = big.chunks[i]!;
      if (i === 4) {
        const err = await layer.read(big, c.fileOffset + 5, 10).catch((e: unknown) => e);
        expect(err).toMatchObject({
          code: expect.stringMatching(/^E_(DIGEST_MISMATCH|DECOMPRESS|TRUNCATED)$/),
        });
      } else {
        expect(
          (await layer.read(big, c.fileOffset, c.size)).equals(
            content.subarray(c.fileOffset, c.fileOffset + c.size),
          ),
        ).toBe(true);
      }
    }
    // a read spanning the bad chunk fails too, and each attempt refetches exactly the bad chunk's
    // span (the good neighbour is served from memory; nothing of the bad one was cached)
    const badSpan = [{ offset: bad.compressedOffset, length: bad.compressedEnd - bad.compressedOffset }];
    for (let attempt = 0; attempt < 2; attempt++) {
      const before = source.requestCount;
      const err = await layer.read(big, bad.fileOffset - 10, 100).catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: expect.stringMatching(/^E_(DIGEST_MISMATCH|DECOMPRESS|TRUNCATED)$/),
      });
      expect(source.requests.slice(before)).toEqual([badSpan]);
    }
    await cache.flush();
    expect(await cachedFiles()).not.toContain(bad.digest);
    expect(layer.state().lastError).toMatch(/E_/);
    expect(layer.state().bad).toBe(false);
  });

  it('a read failing on one chunk never leaves a shared fetch of another chunk pending', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source, { deadlineMs: 5000 });
    const big = node(fx, 'big');
    const content = fx.files.get('big')!;
    const [c0, , , c3] = big.chunks;
    await layer.read(big, c3!.fileOffset, 1); // chunk 3 now in memory
    // chunk 0 (not cached) registers a single-flight fetch, then chunk 3 fails its size check
    const hostile = { ...big, chunks: [c0!, { ...c3!, fileOffset: c0!.size, size: c3!.size + 1 }] };
    const err = await layer.read(hostile, 0, c0!.size + 10).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'E_BAD_TOC' });
    // a later read of chunk 0 joins that fetch, which must have completed (a pending one would
    // end this read with E_DEADLINE)
    expect((await layer.read(big, 0, 100)).equals(content.subarray(0, 100))).toBe(true);
    expect(source.requestCount).toBe(2);
  });

  it('a corrupted cache file is detected and the chunk refetched, never served', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source);
    const big = node(fx, 'big');
    const want = fx.files.get('big')!.subarray(0, chunkSize);
    expect((await layer.read(big, 0, chunkSize)).equals(want)).toBe(true);
    await cache.flush();
    const hex = big.chunks[0]!.digest.slice(7);
    const file = join(root, 'cache', 'chunks', 'sha256', hex.slice(0, 2), hex);
    const bytes = await readFile(file);
    bytes[10] = bytes[10]! ^ 1;
    await writeFile(file, bytes);
    cache.dropMemory();
    const before = source.requestCount;
    expect((await layer.read(big, 0, chunkSize)).equals(want)).toBe(true);
    expect(source.requestCount).toBe(before + 1);
    expect(cache.stats().corrupt).toBe(1);
    await cache.flush();
    expect((await readFile(file)).equals(want)).toBe(true);
  });

  it('a deadline of 0 means no deadline', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    source.delayMs = 120;
    const layer = makeLayer(fx, source, { deadlineMs: 0 });
    const big = node(fx, 'big');
    expect((await layer.read(big, 0, 10)).equals(fx.files.get('big')!.subarray(0, 10))).toBe(true);
  });

  it('prefetch: landmark fetches everything before it, none fetches nothing, default uses prefetchBytes', async () => {
    const fx0 = buildFixture(mixedSpecs(chunkSize), compression);
    const big = fx0.nodes.get('big')!;
    const end = big.chunks[3]!.compressedOffset;
    for (const [hint, extra, expectFetched] of [
      [{ kind: 'landmark', end }, {}, true],
      [{ kind: 'none' }, {}, false],
      [{ kind: 'default' }, { prefetchBytes: end }, true],
      [{ kind: 'default' }, {}, false],
    ] as const) {
      const fx = { ...fx0, index: { ...fx0.index, prefetch: hint } };
      const c = await ChunkCache.open({ root: await mkdtemp(join(root, 'pf-')), minFreeBytes: 0 });
      const source = new TestSource(fx.blob);
      const layer = makeLayer(fx, source, extra, c);
      layer.start();
      await layer.whenPrefetched();
      expect(layer.state().prefetchDone).toBe(true);
      const before = source.requestCount;
      for (const ch of big.chunks) {
        expect(c.has(ch.digest), `${hint.kind} chunk at ${ch.compressedOffset}`).toBe(
          expectFetched && ch.compressedOffset < end,
        );
      }
      if (expectFetched) {
        await layer.read(big, 0, chunkSize * 3);
        expect(source.requestCount).toBe(before);
      } else {
        expect(source.requestCount).toBe(0);
      }
      await c.close();
    }
  });

  it('background fetch caches every chunk and verifies the DiffID', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source, {
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      backgroundUnitBytes: 5000,
      stateDir: join(root, 'layers'),
    });
    layer.start();
    await layer.whenBackgroundDone();
    const st = layer.state();
    expect(st).toMatchObject({ fullyVerified: true, bad: false, backgroundDone: true, percent: 100 });
    expect(st.chunksVerified).toBe(st.chunksTotal);
    expect(st.bytesFetched).toBe(fx.blob.length);
    // the DiffID stream's length: what OLD-protocol `diff-size` reports
    expect(st.uncompressedSize).toBe(fx.uncompressedSize);
    await cache.flush();
    const files = new Set(await cachedFiles());
    for (const n of fx.nodes.values())
      for (const c of n.chunks) if (!c.zeros) expect(files.has(c.digest)).toBe(true);
    // a new layer object with the persisted state neither refetches nor rehashes
    const source2 = new TestSource(fx.blob);
    const again = makeLayer(fx, source2, {
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      stateDir: join(root, 'layers'),
    });
    expect(again.state().uncompressedSize).toBeUndefined();
    again.start();
    await again.whenBackgroundDone();
    expect(again.state().fullyVerified).toBe(true);
    expect(again.state().uncompressedSize).toBe(fx.uncompressedSize);
    // verified before the restart: reported whole, without a per-chunk record
    expect(again.state()).toMatchObject({ percent: 100, chunksVerified: again.state().chunksTotal });
    expect(source2.requestCount).toBe(0);
  });

  it('the background pass decodes a member shared by several small files once', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const small = [...fx.nodes.values()].filter((n) => n.path.startsWith('small'));
    const shared = new Set(small.map((n) => n.chunks[0]!.compressedOffset));
    expect(shared.size).toBeLessThan(small.length); // the fixture packs them into one member
    const before = decompressionCount();
    {
      const layer = makeLayer(fx, new TestSource(fx.blob), { backgroundFetch: true });
      layer.start();
      await layer.whenBackgroundDone();
      // one task per member holding a distinct (not yet seen) chunk digest
      const byDigest = new Map<string, { compressedOffset: number; compressedEnd: number }>();
      for (const n of fx.nodes.values()) {
        for (const c of n.chunks) if (!c.zeros && !byDigest.has(c.digest)) byDigest.set(c.digest, c);
      }
      const members = new Set([...byDigest.values()].map((c) => `${c.compressedOffset}:${c.compressedEnd}`));
      expect(members.size).toBeLessThan(byDigest.size);
      expect(decompressionCount() - before).toBe(members.size);
      expect(layer.state().chunksVerified).toBe(layer.state().chunksTotal);
    }
    for (const n of small)
      expect(
        (await makeLayer(fx, new TestSource(fx.blob)).read(n, 0, n.size)).equals(fx.files.get(n.path)!),
      ).toBe(true);
  });

  it('a wrong diff_id marks the layer bad: later reads fail with E_LAYER_BAD', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source, {
      backgroundFetch: true,
      expectedDiffID: sha256(Buffer.from('wrong')),
    });
    const big = node(fx, 'big');
    expect((await layer.read(big, 0, 10)).length).toBe(10);
    layer.start();
    await layer.whenBackgroundDone();
    const st = layer.state();
    expect(st.bad).toBe(true);
    expect(st.fullyVerified).toBe(false);
    expect(st.lastError).toMatch(/E_LAYER_BAD/);
    expect(st.uncompressedSize).toBeUndefined();
    await expect(layer.read(big, 0, 10)).rejects.toMatchObject({ code: 'E_LAYER_BAD' });
    // only after a second whole pass whose every request asked for fresh bytes
    const freshBytes = source.requests
      .filter((_, i) => source.fresh[i])
      .flat()
      .reduce((n, r) => n + r.length, 0);
    expect(freshBytes).toBe(fx.blob.length);
  });

  it('a diff_id that also covers zero padding after the stream: accepted for zstd only (Podman zstd:chunked)', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const padded = (fill: number) => sha256(Buffer.concat([fx.stream, Buffer.alloc(1024, fill)]));
    const zeros = makeLayer(fx, new TestSource(fx.blob), {
      backgroundFetch: true,
      expectedDiffID: padded(0),
    });
    zeros.start();
    await zeros.whenBackgroundDone();
    if (compression === 'zstd') {
      expect(zeros.state()).toMatchObject({ bad: false, fullyVerified: true });
      // the size the diff_id covers, as the client's diff-size
      expect(zeros.state().uncompressedSize).toBe(fx.uncompressedSize + 1024);
    } else {
      expect(zeros.state()).toMatchObject({ bad: true, fullyVerified: false });
    }
    // padding that is not zeros is content the stream lacks: bad in both formats
    const ones = makeLayer(fx, new TestSource(fx.blob), { backgroundFetch: true, expectedDiffID: padded(1) });
    ones.start();
    await ones.whenBackgroundDone();
    expect(ones.state()).toMatchObject({ bad: true, fullyVerified: false });
  });

  it('a DiffID mismatch caused by stale cached bytes is re-checked with fresh ones: not bad', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    // A cache on the way serves a different (valid, same-length) trailing member unless asked for
    // fresh bytes: no chunk lives there, so only the whole-stream DiffID can notice.
    const toc = fx.members[fx.members.length - 1]!;
    let stale: Buffer | undefined;
    for (let i = 0; i < 1000 && stale === undefined; i++) {
      const plain = randomBytes(700);
      const c = compression === 'gzip' ? gzipSync(plain) : zstdCompress(plain);
      if (c.length === toc.end - toc.offset) stale = c;
    }
    expect(stale).toBeDefined();
    const staleBlob = Buffer.concat([fx.blob.subarray(0, toc.offset), stale!]);
    class StaleCacheSource extends TestSource {
      protected override async readOne(r: ByteRange, opts: ReadRangesOptions): Promise<Buffer> {
        const b = await super.readOne(r, opts);
        return opts.bypassCache === true ? b : Buffer.from(staleBlob.subarray(r.offset, r.offset + r.length));
      }
    }
    const source = new StaleCacheSource(fx.blob);
    const layer = makeLayer(fx, source, { backgroundFetch: true, expectedDiffID: fx.diffID });
    layer.start();
    await layer.whenBackgroundDone();
    const st = layer.state();
    expect(st).toMatchObject({ bad: false, fullyVerified: true, uncompressedSize: fx.uncompressedSize });
    expect(source.fresh.some((f) => f)).toBe(true);
    expect(st.lastError).toMatch(/re-checking/); // the first pass's mismatch is still reported
  });

  it('a chunk failing verification in the background does not mark the layer bad', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const big = node(fx, 'big');
    const bad = big.chunks[2]!;
    source.corrupt.add((bad.compressedOffset + bad.compressedEnd) >> 1);
    const layer = makeLayer(fx, source, {
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      maxBackgroundPasses: 2,
      retryDelayMs: 1,
    });
    layer.start();
    await layer.whenBackgroundDone();
    const st = layer.state();
    expect(st.bad).toBe(false);
    expect(st.fullyVerified).toBe(false);
    expect(st.lastError).toBeDefined();
    expect((await layer.read(big, 0, 100)).equals(fx.files.get('big')!.subarray(0, 100))).toBe(true);
  });

  it('a new cache and layer on the same root serve fetched chunks with zero requests', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source);
    for (const [path, content] of fx.files) await layer.read(node(fx, path), 0, content.length);
    await cache.close();
    cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const source2 = new TestSource(fx.blob);
    const layer2 = makeLayer(fx, source2);
    for (const [path, content] of fx.files) {
      expect((await layer2.read(node(fx, path), 0, content.length)).equals(content)).toBe(true);
    }
    expect(source2.requestCount).toBe(0);
  });

  it('typed errors for bad input: non-regular node, negative range, spans outside the blob, gaps', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const layer = makeLayer(fx, source);
    await expect(layer.read(fx.index.root, 0, 1)).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    const big = node(fx, 'big');
    await expect(layer.read(big, -1, 1)).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    await expect(layer.read(big, 0, Number.NaN)).rejects.toMatchObject({ code: 'E_INVALID_ARGUMENT' });
    expect((await layer.read(big, big.size + 5, 10)).length).toBe(0);
    const hostile = { ...big, chunks: big.chunks.map((c) => ({ ...c, digest: sha256(randomBytes(8)) })) };
    hostile.chunks[0] = { ...hostile.chunks[0]!, compressedEnd: fx.blob.length + 100 };
    await expect(layer.read(hostile, 0, 10)).rejects.toMatchObject({ code: 'E_BAD_TOC' });
    const gappy = { ...big, chunks: [big.chunks[0]!, big.chunks[2]!] };
    await expect(layer.read(gappy, 0, chunkSize * 2)).rejects.toMatchObject({ code: 'E_BAD_TOC' });
    const badDigest = { ...big, chunks: big.chunks.map((c) => ({ ...c, digest: 'sha256:../../x' })) };
    await expect(layer.read(badDigest, 0, 10)).rejects.toMatchObject({ code: 'E_BAD_TOC' });
    expect(await stat(join(root, 'x')).catch(() => undefined)).toBeUndefined();
  });
});

describe('LazyLayer under concurrency and background work', () => {
  it('an on-demand read inside a running background fetch joins it: every byte fetched once', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const source = new TestSource(fx.blob);
    let release!: () => void;
    source.gate = new Promise((r) => (release = r));
    const scheduler = new FetchScheduler({ quietMs: 0, bandwidthBytesPerSec: 0 });
    const layer = makeLayer(fx, source, {
      scheduler,
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      backgroundUnitBytes: 1 << 30,
    });
    layer.start();
    await vi.waitFor(() => expect(source.requestCount).toBe(1)); // the whole blob, in flight
    const big = node(fx, 'big');
    const read = layer.read(big, 0, 100);
    release();
    expect((await read).equals(fx.files.get('big')!.subarray(0, 100))).toBe(true);
    await layer.whenBackgroundDone();
    expect(layer.state().fullyVerified).toBe(true);
    // the read was served from the background request: nothing fetched twice
    expect(source.requestCount).toBe(1);
    expect(layer.state().bytesFetched).toBe(fx.blob.length);
  });

  it('32 concurrent readers with background fetch and DiffID check running: exact bytes', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const source = new TestSource(fx.blob);
    source.delayMs = 1;
    const layer = makeLayer(fx, source, {
      scheduler: new FetchScheduler({ quietMs: 0, backgroundConcurrency: 2 }),
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      backgroundUnitBytes: 8192,
    });
    layer.start();
    const paths = [...fx.files.keys()];
    let mismatches = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        for (let i = 0; i < 150; i++) {
          const path = paths[randomInt(0, paths.length)]!;
          const content = fx.files.get(path)!;
          const off = randomInt(0, content.length + 1);
          const len = randomInt(0, 3 * 4096);
          const got = await layer.read(node(fx, path), off, len);
          if (!got.equals(content.subarray(off, off + len))) mismatches++;
        }
      }),
    );
    expect(mismatches).toBe(0);
    await layer.whenBackgroundDone();
    expect(layer.state()).toMatchObject({ fullyVerified: true, bad: false, percent: 100 });
  });
});

describe('LazyLayer bookkeeping stays off the hot path', () => {
  /** The fixture plus `extra` files of one chunk each (distinct digests): a big TOC, cheaply. */
  function bigIndex(extra: number): { fx: Fixture; distinct: number } {
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const template = fx.nodes.get('small0')!;
    const nodes = [...fx.index.nodes];
    for (let i = 0; i < extra; i++) {
      const digest = 'sha256:' + i.toString(16).padStart(64, '0');
      nodes.push({
        ...template,
        id: nodes.length,
        path: `f${i}`,
        chunks: [{ ...template.chunks[0]!, digest }],
      });
    }
    const distinct = new Set<string>();
    for (const n of nodes)
      if (n?.type === 'reg') for (const c of n.chunks) if (!c.zeros) distinct.add(c.digest);
    return { fx: { ...fx, index: { ...fx.index, nodes } }, distinct: distinct.size };
  }

  it('state() never builds the chunk plan; start() builds it once, asynchronously', async () => {
    const { fx, distinct } = bigIndex(300_000);
    const layer = makeLayer(fx, new TestSource(fx.blob));
    const before = layer.state();
    expect(before).toMatchObject({ chunksTotal: 0, percent: 0, chunksVerified: 0 });
    layer.start();
    expect(layer.state().chunksTotal).toBe(0); // start() returns before the plan exists
    await layer.whenPrefetched();
    expect(layer.state().chunksTotal).toBe(distinct);
  });

  it('pin() before the plan exists pins at once and adds every chunk once it does', async () => {
    const { fx, distinct } = bigIndex(2000);
    const layer = makeLayer(fx, new TestSource(fx.blob));
    layer.pin();
    expect(layer.state().pinned).toBe(true);
    await vi.waitFor(() => expect(cache.stats().pinnedEntries).toBe(distinct));
    layer.unpin();
    expect(layer.state().pinned).toBe(false);
    expect(cache.stats().pinnedEntries).toBe(0);
  });

  it('an unexpected throw in prefetch/background is recorded, never an unhandled rejection', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const big = fx.nodes.get('big')!;
    // a logger whose debug() throws: runPrefetch calls it outside any try, after the prefetch
    const broken = {
      debug: () => {
        throw new Error('logger exploded');
      },
      info: () => undefined,
      warn: () => undefined,
      error: () => undefined,
    };
    const logger = { child: () => broken } as unknown as Logger;
    const unhandled: unknown[] = [];
    const onUnhandled = (r: unknown): void => {
      unhandled.push(r);
    };
    process.on('unhandledRejection', onUnhandled);
    try {
      const layer = makeLayer(
        {
          ...fx,
          index: { ...fx.index, prefetch: { kind: 'landmark', end: big.chunks[2]!.compressedOffset } },
        },
        new TestSource(fx.blob),
        // retries after the recorded failure: no real 30 s / 60 s pauses in a unit test
        { logger, backgroundFetch: true, expectedDiffID: fx.diffID, retryDelayMs: 1 },
      );
      layer.start();
      await layer.whenPrefetched();
      await layer.whenBackgroundDone();
      await new Promise((r) => setTimeout(r, 20));
      expect(layer.state().lastError).toMatch(/logger exploded/);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('DiffID passes: at most hashConcurrency store-wide, each layer verified', async () => {
    const scheduler = new FetchScheduler({ quietMs: 0, hashConcurrency: 2, backgroundConcurrency: 6 });
    const layers = Array.from({ length: 6 }, (_, i) => {
      const fx = buildFixture(mixedSpecs(4096), i % 2 === 0 ? 'gzip' : 'zstd');
      const source = new TestSource(fx.blob);
      source.delayMs = 15;
      return {
        fx,
        layer: makeLayer(fx, source, {
          scheduler,
          backgroundFetch: true,
          expectedDiffID: fx.diffID,
          backgroundUnitBytes: 8192,
          layerKey: `sha256:${String(i).repeat(64)}`,
        }),
      };
    });
    let maxRunning = 0;
    const timer = setInterval(() => {
      maxRunning = Math.max(maxRunning, scheduler.stats().hashRunning);
    }, 2);
    for (const { layer } of layers) layer.start();
    await Promise.all(layers.map(({ layer }) => layer.whenBackgroundDone()));
    clearInterval(timer);
    for (const { layer, fx } of layers) {
      expect(layer.state()).toMatchObject({ fullyVerified: true, uncompressedSize: fx.uncompressedSize });
    }
    expect(maxRunning).toBe(2);
  });
});
