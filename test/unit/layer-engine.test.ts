/**
 * The layer fetch engine: in-flight span sharing, the local compressed-bytes seam, preemption that
 * keeps received bytes, the quiet period and the bypassCache re-check. Time is a ManualClock and
 * requests are held and released one by one: nothing here depends on the machine's speed.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BlobStore } from '../../src/cache/blob-store.js';
import { ChunkCache } from '../../src/cache/index.js';
import {
  FetchScheduler,
  LazyLayer,
  SpanFetcher,
  type BlobSource,
  type ByteRange,
  type LazyLayerOptions,
  type ReadRangesOptions,
} from '../../src/layer/index.js';
import { ManualClock } from '../../src/util/clock.js';
import { spanBuffers } from '../../src/util/span-buffers.js';
import type { Chunk, TreeNode } from '../../src/format/model.js';
import { StoreError } from '../../src/util/errors.js';
import { silentLogger } from '../../src/util/logger.js';
import { buildFixture, MemoryLocalBytes, mixedSpecs, sha256, type Fixture } from './layer-fixture.js';

interface Held {
  ranges: ByteRange[];
  bypassCache: boolean;
  release: () => void;
  settled: boolean;
  aborted: boolean;
}

/** Every request waits until the test releases it (or `auto` is on); an abort ends it at once. */
class HeldSource implements BlobSource {
  held: Held[] = [];
  auto = false;
  /** Results are taken from util/span-buffers.ts: made for the caller alone, given back by it. */
  handsOver = false;
  /** Each result is also reported through onProgress, in two views of it, before it is returned. */
  streams = false;
  /** Offsets whose byte is flipped, for requests without bypassCache (a bad cache on the way). */
  corruptUnlessBypass = new Set<number>();
  /** Offsets flipped in the first response covering them only (a transient bad read). */
  corruptOnce = new Set<number>();

  constructor(private readonly blob: Buffer) {}

  get size(): number {
    return this.blob.length;
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    return (await this.readRanges([{ offset, length }], { signal }))[0]!;
  }

  async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const h: Held = {
      ranges: ranges.map((r) => ({ ...r })),
      bypassCache: opts.bypassCache === true,
      release,
      settled: false,
      aborted: false,
    };
    this.held.push(h);
    if (this.auto) release();
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        h.aborted = true;
        reject(new StoreError('E_ABORTED', 'aborted'));
      };
      if (opts.signal?.aborted) onAbort();
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      void released.then(() => {
        opts.signal?.removeEventListener('abort', onAbort);
        resolve();
      });
    });
    h.settled = true;
    return ranges.map((r) => {
      const out = this.handsOver ? spanBuffers.take(r.length) : Buffer.allocUnsafeSlow(r.length);
      this.blob.copy(out, 0, r.offset, r.offset + r.length);
      for (let i = 0; i < out.length; i++) {
        const at = r.offset + i;
        if (!h.bypassCache && this.corruptUnlessBypass.has(at)) out[i] = out[i]! ^ 0x5a;
        if (this.corruptOnce.delete(at)) out[i] = out[i]! ^ 0x5a;
      }
      if (this.streams && opts.onProgress !== undefined) {
        const half = Math.floor(out.length / 2);
        opts.onProgress(r.offset, out.subarray(0, half));
        opts.onProgress(r.offset + half, out.subarray(half));
      }
      return out;
    });
  }

  releaseAll(): void {
    this.auto = true;
    for (const h of this.held) h.release();
  }

  /** Requests that delivered bytes (not aborted). */
  delivered(): ByteRange[] {
    return this.held.filter((h) => h.settled && !h.aborted).flatMap((h) => h.ranges);
  }
}

async function settle(rounds = 30): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((r) => setImmediate(r));
}

let root: string;
let cache: ChunkCache;
const layers: LazyLayer[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'layer-engine-'));
  cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 0 });
});
afterEach(async () => {
  for (const l of layers.splice(0)) await l.close();
  await cache.close();
  await rm(root, { recursive: true, force: true });
});

function makeLayer(fx: Fixture, source: BlobSource, extra: Partial<LazyLayerOptions> = {}): LazyLayer {
  const layer = new LazyLayer({
    index: fx.index,
    source,
    cache,
    layerKey: 'sha256:' + 'cd'.repeat(32),
    scheduler: new FetchScheduler({ quietMs: 0, bandwidthBytesPerSec: 0 }),
    backgroundFetch: false,
    prefetch: false,
    ...extra,
  });
  layers.push(layer);
  return layer;
}

describe('SpanFetcher', () => {
  it('two overlapping requests: the second waits for the first and fetches only the rest', async () => {
    const blob = Buffer.from(Array.from({ length: 4000 }, (_, i) => i % 251));
    const source = new HeldSource(blob);
    let fetched = 0;
    const f = new SpanFetcher({
      source,
      blobSize: blob.length,
      onFetched: (n) => (fetched += n),
      logger: silentLogger,
      context: {},
    });
    const a = f.fetch([{ offset: 0, length: 1000 }], { priority: 'on-demand' });
    const b = f.fetch(
      [
        { offset: 500, length: 1000 },
        { offset: 3000, length: 10 },
      ],
      { priority: 'background' },
    );
    expect(source.held.map((h) => h.ranges)).toEqual([
      [{ offset: 0, length: 1000 }],
      [
        { offset: 1000, length: 500 },
        { offset: 3000, length: 10 },
      ],
    ]);
    source.releaseAll();
    const [[x], [y, z]] = await Promise.all([a, b]);
    expect(x!.equals(blob.subarray(0, 1000))).toBe(true);
    expect(y!.equals(blob.subarray(500, 1500))).toBe(true);
    expect(z!.equals(blob.subarray(3000, 3010))).toBe(true);
    expect(fetched).toBe(1510);
    expect(f.inFlight()).toEqual([]);
  });

  it('a reader does not join a flight stuck for longer than staleJoinMs: it fetches anew (injected clock)', async () => {
    const blob = Buffer.from(Array.from({ length: 2000 }, (_, i) => i % 253));
    const source = new HeldSource(blob);
    const clock = new ManualClock();
    const f = new SpanFetcher({
      source,
      blobSize: blob.length,
      onFetched: () => undefined,
      logger: silentLogger,
      context: {},
      clock,
      staleJoinMs: 1000,
    });
    // a request that hangs (a registry that stopped answering)
    const stuck = f.fetch([{ offset: 0, length: 1000 }], { priority: 'on-demand' });
    stuck.catch(() => undefined);
    // still young: a second reader joins it, no new request
    const joined = f.fetch([{ offset: 100, length: 100 }], { priority: 'on-demand' });
    joined.catch(() => undefined);
    expect(source.held).toHaveLength(1);
    // older than staleJoinMs: the next reader fetches its own bytes and gets them
    clock.advance(1001);
    const fresh = f.fetch([{ offset: 200, length: 100 }], { priority: 'on-demand' });
    expect(source.held).toHaveLength(2);
    expect(source.held[1]!.ranges).toEqual([{ offset: 200, length: 100 }]);
    source.held[1]!.release();
    const [got] = await fresh;
    expect(got!.equals(blob.subarray(200, 300))).toBe(true);
    // background callers still join the old flight (they wait anyway; bytes once)
    const bg = f.fetch([{ offset: 300, length: 10 }], { priority: 'background' });
    expect(source.held).toHaveLength(2);
    source.releaseAll();
    const [[a], [b], [c]] = await Promise.all([stuck, joined, bg]);
    expect(a!.equals(blob.subarray(0, 1000))).toBe(true);
    expect(b!.equals(blob.subarray(100, 200))).toBe(true);
    expect(c!.equals(blob.subarray(300, 310))).toBe(true);
  });

  it('reads covered spans from the local store, and bypassCache goes to the origin', async () => {
    const blob = Buffer.from(Array.from({ length: 2000 }, (_, i) => i % 13));
    const source = new HeldSource(blob);
    source.auto = true;
    const local = new MemoryLocalBytes(blob.length);
    local.onCompressedBytes(0, blob.subarray(0, 1000));
    const f = new SpanFetcher({
      source,
      blobSize: blob.length,
      localBytes: local,
      onCompressedBytes: local.onCompressedBytes,
      onFetched: () => undefined,
      logger: silentLogger,
      context: {},
    });
    const [a] = await f.fetch([{ offset: 200, length: 1000 }], { priority: 'on-demand' });
    expect(a!.equals(blob.subarray(200, 1200))).toBe(true);
    expect(source.held.map((h) => h.ranges)).toEqual([[{ offset: 1000, length: 200 }]]);
    const [b] = await f.fetch([{ offset: 0, length: 100 }], { priority: 'background', bypassCache: true });
    expect(b!.equals(blob.subarray(0, 100))).toBe(true);
    expect(source.held.at(-1)).toMatchObject({ ranges: [{ offset: 0, length: 100 }], bypassCache: true });
  });
});

/** A fetcher whose sink holds each write open until the test finishes it. */
function fetcherWithSink(source: HeldSource, size: number) {
  const writes: Buffer[] = [];
  const finish: Array<() => void> = [];
  const f = new SpanFetcher({
    source,
    blobSize: size,
    // a sink writing each span to a file: it reads the buffer until its write settles
    onCompressedBytes: (_o, data) => {
      writes.push(data);
      return new Promise<void>((r) => finish.push(r));
    },
    onFetched: () => undefined,
    logger: silentLogger,
    context: {},
  });
  return { f, writes, finish };
}

describe('SpanFetcher gives span buffers back', () => {
  const blob = Buffer.from(Array.from({ length: 8000 }, (_, i) => i % 251));

  it('once the flight ended, the sink wrote it and every caller is done with it; not before', async () => {
    const source = new HeldSource(blob);
    source.handsOver = true;
    const { f, writes, finish } = fetcherWithSink(source, blob.length);
    const a = f.fetchLeased([{ offset: 0, length: 5000 }], { priority: 'on-demand' });
    const b = f.fetchLeased([{ offset: 500, length: 500 }], { priority: 'on-demand' }); // joins a's
    source.releaseAll();
    const [la, lb] = await Promise.all([a, b]);
    expect(source.held).toHaveLength(1);
    const span = writes[0]!;
    expect(lb.bufs[0]!.equals(blob.subarray(500, 1000))).toBe(true);
    la.release();
    expect(span.length).toBe(5000); // b still reads its view of it, the sink still writes it
    lb.release();
    lb.release(); // twice is once
    expect(span.length).toBe(5000); // the sink's write is still running
    finish[0]!();
    await settle(2);
    expect(span.length).toBe(0); // given back: every view of it reads empty, never other bytes
    expect(lb.bufs[0]!.length).toBe(0);
  });

  it('never while a plain fetch holds it, nor when the source did not hand it over', async () => {
    const source = new HeldSource(blob);
    source.handsOver = true;
    source.auto = true;
    const { f, writes, finish } = fetcherWithSink(source, blob.length);
    const leased = f.fetchLeased([{ offset: 0, length: 5000 }], { priority: 'on-demand' });
    const plain = f.fetch([{ offset: 1000, length: 100 }], { priority: 'on-demand' }); // says nothing
    (await leased).release();
    await plain;
    for (const done of finish) done();
    await settle(2);
    expect(writes[0]!.length).toBe(5000);

    const shared = new HeldSource(blob); // buffers not taken from span-buffers: never given back
    shared.auto = true;
    const other = fetcherWithSink(shared, blob.length);
    const got = await other.f.fetchLeased([{ offset: 0, length: 6000 }], { priority: 'on-demand' });
    got.release();
    for (const done of other.finish) done();
    await settle(2);
    expect(got.bufs[0]!.equals(blob.subarray(0, 6000))).toBe(true);
  });

  it("a copy stitched from several flights is the caller's own: released with its lease", async () => {
    const big = Buffer.from(Array.from({ length: 200_000 }, (_, i) => i % 249));
    const source = new HeldSource(big);
    source.handsOver = true;
    source.auto = true;
    const { f, finish } = fetcherWithSink(source, big.length);
    const first = f.fetchLeased([{ offset: 0, length: 4200 }], { priority: 'on-demand' });
    // joins the first flight and fetches the rest: stitched into a copy (larger than Node's
    // allocation pool, which small copies come from and which is never released)
    const whole = f.fetchLeased([{ offset: 0, length: big.length }], { priority: 'on-demand' });
    const [l1, l2] = await Promise.all([first, whole]);
    expect(source.held).toHaveLength(2);
    expect(l2.bufs[0]!.equals(big)).toBe(true);
    l2.release();
    expect(l2.bufs[0]!.length).toBe(0);
    expect(l1.bufs[0]!.equals(big.subarray(0, 4200))).toBe(true); // still held by its own caller
    l1.release();
    for (const done of finish) done();
    await settle(2);
    expect(l1.bufs[0]!.length).toBe(0);
  });
});

describe('SpanFetcher gives background spans back', () => {
  const MiB = 1024 * 1024;
  const big = Buffer.from(Array.from({ length: 2 * MiB }, (_, i) => i % 253));

  it('a span streamed to the sink: once every piece is written and the caller is done; freed, not kept', async () => {
    const source = new HeldSource(big);
    source.handsOver = true;
    source.streams = true;
    source.auto = true;
    const { f, writes, finish } = fetcherWithSink(source, big.length);
    spanBuffers.trim();
    const leased = await f.fetchLeased([{ offset: 0, length: big.length }], { priority: 'background' });
    const got = leased.bufs[0]!;
    expect(got.equals(big)).toBe(true);
    // streamed in pieces while it arrived (views of the buffer, no copies), every byte once
    expect(writes.reduce((n, w) => n + w.length, 0)).toBe(big.length);
    expect(writes.every((w) => w.buffer === got.buffer)).toBe(true);
    leased.release();
    finish.shift()!();
    await settle(4);
    expect(got.length).toBe(big.length); // the sink still writes the other pieces
    for (const done of finish.splice(0)) done();
    await settle(4);
    expect(got.length).toBe(0); // given back: every view reads empty, never other bytes
    // background units come at a paced rate: released, not kept resident for reuse
    expect(spanBuffers.freeBytes).toBe(0);

    // an on-demand span of the same size is kept for the next fetch
    const onDemand = await f.fetchLeased([{ offset: 0, length: big.length }], { priority: 'on-demand' });
    onDemand.release();
    for (const done of finish.splice(0)) done();
    await settle(4);
    expect(spanBuffers.freeBytes).toBe(big.length);
    spanBuffers.trim();
  });
});

describe('SpanFetcher gives local reads back', () => {
  it("a local read is the caller's own: given back with its lease, never for a plain fetch", async () => {
    const big = Buffer.from(Array.from({ length: 100_000 }, (_, i) => i % 247));
    const source = new HeldSource(big);
    source.auto = true;
    const local = new MemoryLocalBytes(big.length);
    local.onCompressedBytes(0, big);
    const f = new SpanFetcher({
      source,
      blobSize: big.length,
      localBytes: local,
      onCompressedBytes: local.onCompressedBytes,
      onFetched: () => undefined,
      logger: silentLogger,
      context: {},
    });
    const leased = await f.fetchLeased([{ offset: 1000, length: 50_000 }], { priority: 'on-demand' });
    expect(source.held).toHaveLength(0); // read locally, not fetched
    const got = leased.bufs[0]!;
    expect(got.equals(big.subarray(1000, 51_000))).toBe(true);
    leased.release();
    expect(got.length).toBe(0); // given back: reads empty, never other bytes
    const [plain] = await f.fetch([{ offset: 1000, length: 50_000 }], { priority: 'on-demand' });
    await settle(2);
    expect(plain!.equals(big.subarray(1000, 51_000))).toBe(true);
    expect(local.reads).toBe(2);
  });
});

describe('LazyLayer fetch engine', () => {
  it('a preempted background fetch keeps the units it received; every byte is received once', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const source = new HeldSource(fx.blob);
    const local = new MemoryLocalBytes(fx.blob.length);
    const scheduler = new FetchScheduler({ quietMs: 0, bandwidthBytesPerSec: 0 });
    const layer = makeLayer(fx, source, {
      scheduler,
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      backgroundUnitBytes: 4096,
      backgroundWindow: 1,
      local,
    });
    layer.start();
    await vi.waitFor(() => expect(source.held.length).toBe(1));
    const first = source.held[0]!;
    first.release(); // unit 1 arrives
    await vi.waitFor(() => expect(source.held.length).toBe(2));
    const second = source.held[1]!; // unit 2 in flight
    // an on-demand read far from unit 2 preempts it
    const big = fx.nodes.get('big')!;
    const last = big.chunks[big.chunks.length - 1]!;
    const read = layer.read(big, last.fileOffset, 10);
    await vi.waitFor(() => expect(second.aborted).toBe(true));
    source.releaseAll();
    expect((await read).equals(fx.files.get('big')!.subarray(last.fileOffset, last.fileOffset + 10))).toBe(
      true,
    );
    await layer.whenBackgroundDone();
    expect(layer.state()).toMatchObject({ fullyVerified: true, bad: false });
    expect(scheduler.stats().preemptions).toBeGreaterThanOrEqual(1);
    // unit 1 was never asked for again; the on-demand span was read back from the local store
    const unit1 = first.ranges[0]!;
    expect(source.held.filter((h) => h.ranges.some((r) => r.offset === unit1.offset))).toHaveLength(1);
    expect(local.reads).toBeGreaterThan(0);
    local.expectEachByteOnce(fx.blob.length);
    expect(layer.state().bytesFetched).toBe(fx.blob.length);
  });

  it('background fetch waits the quiet period after start(), before any read (injected clock)', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const clock = new ManualClock();
    const scheduler = new FetchScheduler({ quietMs: 2000, bandwidthBytesPerSec: 0, clock });
    const layer = makeLayer(fx, source, { scheduler, backgroundFetch: true, expectedDiffID: fx.diffID });
    layer.start();
    await layer.whenPrefetched();
    await settle();
    clock.advance(1999);
    await settle();
    expect(source.held).toHaveLength(0);
    clock.advance(1);
    await layer.whenBackgroundDone();
    expect(layer.state().fullyVerified).toBe(true);
  });

  it('background fetch starts only after the quiet period following the last read (injected clock)', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const clock = new ManualClock();
    const scheduler = new FetchScheduler({ quietMs: 3000, bandwidthBytesPerSec: 0, clock });
    const layer = makeLayer(fx, source, { scheduler, backgroundFetch: true, expectedDiffID: fx.diffID });
    const small = fx.nodes.get('small0')!;
    await layer.read(small, 0, 1); // t = 0
    const afterRead = source.held.length;
    layer.start();
    await layer.whenPrefetched();
    await settle();
    clock.advance(2999);
    await settle();
    expect(source.held.length).toBe(afterRead);
    clock.advance(1);
    await layer.whenBackgroundDone();
    expect(source.held.length).toBeGreaterThan(afterRead);
    expect(layer.state().fullyVerified).toBe(true);
  });

  it('background bytes are paced by the bandwidth bound (injected clock)', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const clock = new ManualClock();
    const rate = 10_000; // bytes/s
    const scheduler = new FetchScheduler({ quietMs: 0, bandwidthBytesPerSec: rate, clock });
    const layer = makeLayer(fx, source, { scheduler, backgroundFetch: true, backgroundUnitBytes: 4096 });
    layer.start();
    let done = false;
    void layer.whenBackgroundDone().then(() => (done = true));
    const fetchedAt = (): number => source.delivered().reduce((n, r) => n + r.length, 0);
    for (let t = 0; !done; t += 100) {
      await settle();
      // never more than the rate allows, plus the one unit that may start at once
      expect(fetchedAt()).toBeLessThanOrEqual((rate * clock.now()) / 1000 + 8192);
      clock.advance(100);
      expect(t).toBeLessThan(1_000_000); // the pass ends
    }
    expect(clock.now()).toBeGreaterThanOrEqual((fetchedAt() - 8192) / (rate / 1000));
    expect(layer.state().backgroundDone).toBe(true);
  });

  it('a DiffID mismatch from bad local bytes is cured by the re-check, which bypasses the local store', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const local = new MemoryLocalBytes(fx.blob.length);
    // a local copy of the whole blob whose trailing (TOC) member is damaged: no chunk lives there,
    // so only the whole-stream DiffID can notice
    local.onCompressedBytes(0, fx.blob);
    const toc = fx.members[fx.members.length - 1]!;
    const mid = (toc.offset + toc.end) >> 1;
    local.bytes[mid] = local.bytes[mid]! ^ 0x5a;
    local.received.length = 0;
    const layer = makeLayer(fx, source, {
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      local,
      retryDelayMs: 1,
    });
    layer.start();
    await layer.whenBackgroundDone();
    const st = layer.state();
    expect(st).toMatchObject({ bad: false, fullyVerified: true, uncompressedSize: fx.uncompressedSize });
    // the damaged member does not even decompress: that pass failed, the next one went to the origin
    expect(st.lastError).toMatch(/E_DECOMPRESS/);
    // the first pass read only local bytes; the re-check fetched the whole blob from the origin
    const fromOrigin = source.held.filter((h) => h.bypassCache).flatMap((h) => h.ranges);
    expect(fromOrigin.reduce((n, r) => n + r.length, 0)).toBe(fx.blob.length);
    expect(source.held.every((h) => h.bypassCache)).toBe(true);
  });

  it('a transient bad read is cured by the re-check with freshly fetched bytes', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const toc = fx.members[fx.members.length - 1]!;
    source.corruptOnce.add((toc.offset + toc.end) >> 1);
    const layer = makeLayer(fx, source, { backgroundFetch: true, expectedDiffID: fx.diffID });
    layer.start();
    await layer.whenBackgroundDone();
    expect(layer.state()).toMatchObject({ bad: false, fullyVerified: true });
    expect(source.held.some((h) => h.bypassCache)).toBe(true);
  });

  it('prefetch coalesces neighbouring chunk spans into one request', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const prefetchEnd = fx.members[fx.members.length - 1]!.offset;
    const layer = makeLayer(
      { ...fx, index: { ...fx.index, prefetch: { kind: 'landmark', end: prefetchEnd } } },
      source,
      { prefetch: true },
    );
    layer.start();
    await layer.whenPrefetched();
    expect(source.held).toHaveLength(1);
    expect(source.held[0]!.ranges).toHaveLength(1);
    for (const [path, content] of fx.files) {
      expect((await layer.read(fx.nodes.get(path)!, 0, content.length)).equals(content)).toBe(true);
    }
    expect(source.held).toHaveLength(1);
  });
});

describe('prefetched chunks', () => {
  interface Prefetching {
    fx: Fixture;
    source: HeldSource;
    layer: LazyLayer;
    mem: ChunkCache;
    /** The buffer each chunk was put into the cache with (detached once released). */
    put: Map<string, Buffer>;
    big: { node: TreeNode; want: Buffer };
  }

  /** A layer prefetching all of itself into a cache with a `memoryBytes` LRU; closed after `body`. */
  async function withPrefetch(
    memoryBytes: number,
    auto: boolean,
    body: (p: Prefetching) => Promise<void>,
  ): Promise<void> {
    // 64 KiB chunks and a short tail chunk, each decoded into a buffer of its own
    const fx = buildFixture(mixedSpecs(64 * 1024), 'zstd');
    const source = new HeldSource(fx.blob);
    source.auto = auto;
    const mem = await ChunkCache.open({ root: join(root, 'mem'), minFreeBytes: 0, memoryBytes });
    const put = new Map<string, Buffer>();
    const orig = mem.put.bind(mem);
    vi.spyOn(mem, 'put').mockImplementation((digest, data, opts) => {
      put.set(digest, data);
      return orig(digest, data, opts);
    });
    const layer = makeLayer(prefetchAll(fx), source, { prefetch: true, cache: mem });
    try {
      layer.start();
      const big = { node: fx.nodes.get('big')!, want: fx.files.get('big')! };
      await body({ fx, source, layer, mem, put, big });
    } finally {
      for (const l of layers.splice(0)) await l.close();
      await mem.close();
    }
  }
  /** Released (detached): the short tail chunk too (decoded into memory of its own). */
  const expectReleased = (put: Map<string, Buffer>, c: { digest: string; size: number }): void => {
    expect(put.get(c.digest)!.length).toBe(0);
  };

  it('are kept in memory for their reader and written to disk; read to their end, released', () =>
    withPrefetch(8 << 20, true, async ({ layer, mem, put, big }) => {
      await layer.whenPrefetched();
      await mem.flush();
      for (const c of big.node.chunks) {
        expect(mem.onDisk(c.digest)).toBe(true);
        expect(mem.getMemory(c.digest)).toBeDefined();
      }
      expect((await layer.read(big.node, 0, big.want.length)).equals(big.want)).toBe(true);
      await settle();
      for (const c of big.node.chunks) {
        expect(mem.getMemory(c.digest)).toBeUndefined();
        expectReleased(put, c);
      }
    }));

  it('one the memory LRU does not keep is released once written', () =>
    // a quarter of 128 KiB is the largest chunk the LRU keeps: none of these 64 KiB chunks
    withPrefetch(128 * 1024, true, async ({ layer, mem, put, big }) => {
      await layer.whenPrefetched();
      await mem.flush();
      for (const c of big.node.chunks) {
        expect(mem.onDisk(c.digest)).toBe(true);
        // the short tail chunk is small enough for the LRU: kept, not released
        if (c.size > 32 * 1024) expectReleased(put, c);
        else expect(mem.getMemory(c.digest)).toBe(put.get(c.digest));
      }
      expect((await layer.read(big.node, 0, big.want.length)).equals(big.want)).toBe(true);
    }));

  it('a reader that joined the prefetch keeps its bytes: that buffer is not released', () =>
    withPrefetch(128 * 1024, false, async ({ source, layer, mem, put, big }) => {
      while (source.held.length === 0) await settle(1);
      const [first, second] = big.node.chunks as [Chunk, Chunk];
      // joins the in-flight prefetch of its first chunk instead of fetching it again
      const reading = layer.read(big.node, 0, first.size);
      await settle();
      expect(source.held).toHaveLength(1);
      source.releaseAll();
      const got = await reading;
      await layer.whenPrefetched();
      await mem.flush();
      expect(got.equals(big.want.subarray(0, first.size))).toBe(true);
      expect(put.get(first.digest)!.length).toBe(first.size);
      // the chunks nobody joined were released
      expectReleased(put, second);
    }));
});

/** A zstd fixture, a source that answers at once and an empty local compressed store. */
function localFixture(): { fx: Fixture; source: HeldSource; local: MemoryLocalBytes } {
  const fx = buildFixture(mixedSpecs(4096), 'zstd');
  const source = new HeldSource(fx.blob);
  source.auto = true;
  return { fx, source, local: new MemoryLocalBytes(fx.blob.length) };
}

/** The fixture with all of its blob marked for prefetch (a landmark at its end). */
const prefetchAll = (fx: Fixture): Fixture => ({
  ...fx,
  index: { ...fx.index, prefetch: { kind: 'landmark', end: fx.blob.length } },
});

describe('a prefetch staged in the local compressed store', () => {
  it('fetches the region once, decodes nothing until the first read, then decodes from local bytes', async () => {
    const { fx, source, local } = localFixture();
    const mem = await ChunkCache.open({ root: join(root, 'mem'), minFreeBytes: 0, memoryBytes: 1 << 20 });
    const put = vi.spyOn(mem, 'put');
    try {
      const layer = makeLayer(prefetchAll(fx), source, { prefetch: true, cache: mem, local });
      layer.start();
      await layer.whenPrefetched();
      await settle();
      // one request for the region, kept locally; no chunk decoded while nobody reads the layer
      expect(source.delivered()).toHaveLength(1);
      const data = [...fx.nodes.values()]
        .flatMap((n) => (n.type === 'reg' ? n.chunks : []))
        .filter((c) => !c.zeros);
      // every distinct chunk (the plan decodes a digest once) has its compressed bytes locally
      const digests = new Set(data.map((c) => c.digest));
      for (const d of digests) {
        const copies = data.filter((c) => c.digest === d);
        expect(
          copies.some((c) => local.covered(c.compressedOffset, c.compressedEnd - c.compressedOffset)),
        ).toBe(true);
      }
      expect(put).not.toHaveBeenCalled();
      expect(layer.state().prefetchDone).toBe(true);
      // the first read starts the decode of the whole region, from the local bytes
      const [path, content] = [...fx.files][0]!;
      expect((await layer.read(fx.nodes.get(path)!, 0, content.length)).equals(content)).toBe(true);
      await layer.whenPrefetchDecoded();
      for (const c of data) expect(mem.has(c.digest)).toBe(true);
      for (const [p, want] of fx.files) {
        expect((await layer.read(fx.nodes.get(p)!, 0, want.length)).equals(want)).toBe(true);
      }
      expect(source.delivered()).toHaveLength(1);
    } finally {
      for (const l of layers.splice(0)) await l.close();
      await mem.close();
    }
  });

  it('a layer closed before its first read stops waiting to decode', async () => {
    const { fx, source, local } = localFixture();
    const layer = makeLayer(prefetchAll(fx), source, { prefetch: true, local });
    layer.start();
    await layer.whenPrefetched();
    layers.splice(0);
    await layer.close();
    await layer.whenPrefetchDecoded();
    expect(source.delivered()).toHaveLength(1);
  });
});

describe('the resume store (cache/blob-store.ts LocalBlob) in the engine seam', () => {
  it('chunks read while their compressed bytes are kept locally stay off disk until the background pass writes them', async () => {
    const { fx, source, local } = localFixture();
    const mem = await ChunkCache.open({ root: join(root, 'mem'), minFreeBytes: 0, memoryBytes: 1 << 20 });
    try {
      const layer = makeLayer(fx, source, {
        cache: mem,
        backgroundFetch: true,
        expectedDiffID: fx.diffID,
        local,
      });
      const big = fx.nodes.get('big')!;
      const want = fx.files.get('big')!;
      const first = big.chunks[0]!;
      const half = Math.floor(first.size / 2);
      expect((await layer.read(big, 0, half)).equals(want.subarray(0, half))).toBe(true);
      await mem.flush();
      // half of it served: kept in memory for the rest, and no chunk file written
      expect(mem.getMemory(first.digest)).toBeDefined();
      expect(mem.onDisk(first.digest)).toBe(false);
      expect((await layer.read(big, 0, want.length)).equals(want)).toBe(true);
      await mem.flush();
      // every chunk served whole: gone from memory (the reader's page cache has the bytes), and
      // still not one chunk file written
      expect(big.chunks.every((c) => mem.getMemory(c.digest) === undefined && !mem.onDisk(c.digest))).toBe(
        true,
      );
      expect(mem.stats().writes).toBe(0);
      // read-ahead over chunks a reader already had decodes none of them again
      const localReads = local.reads;
      await layer.prefetchRange(big, 0, want.length);
      expect(local.reads).toBe(localReads);
      expect(big.chunks.every((c) => mem.getMemory(c.digest) === undefined)).toBe(true);
      // read again: decoded again from the local bytes, nothing fetched again, and this time
      // written to disk (a chunk is decoded at most twice)
      const fetched = layer.state().bytesFetched;
      expect((await layer.read(big, 0, want.length)).equals(want)).toBe(true);
      expect(layer.state().bytesFetched).toBe(fetched);
      expect(local.reads).toBeGreaterThan(0);
      await mem.flush();
      expect(big.chunks.every((c) => mem.onDisk(c.digest))).toBe(true);
      // the background pass writes every chunk to disk before the layer counts as verified
      layer.start();
      await layer.whenBackgroundDone();
      expect(layer.state()).toMatchObject({ fullyVerified: true, bad: false });
      await mem.flush();
      for (const n of fx.nodes.values())
        for (const c of n.chunks) if (!c.zeros) expect(mem.onDisk(c.digest)).toBe(true);
      local.expectEachByteOnce(fx.blob.length);
    } finally {
      for (const l of layers.splice(0)) await l.close();
      await mem.close();
    }
  });

  it.each([
    // the shared test cache has memoryBytes 0: nothing could hold the chunk but the disk
    ['with a local store but no memory LRU', true],
    ['without a local store', false],
  ])('%s, a chunk read is written to the disk cache', async (_, withLocal) => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const layer = makeLayer(fx, source, withLocal ? { local: new MemoryLocalBytes(fx.blob.length) } : {});
    const big = fx.nodes.get('big')!;
    await layer.read(big, 0, 10);
    await cache.flush();
    expect(cache.onDisk(big.chunks[0]!.digest)).toBe(true);
  });

  it('the background pass waits for the local copy to settle: no more than its window ahead', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const local = new (class extends MemoryLocalBytes {
      calls = 0;
      settle(): Promise<void> {
        this.calls++;
        return gate;
      }
    })(fx.blob.length);
    const layer = makeLayer(fx, source, {
      backgroundFetch: true,
      backgroundUnitBytes: 4096,
      backgroundWindow: 2,
      expectedDiffID: fx.diffID,
      local,
    });
    layer.start();
    // a slow disk: the pass asked to settle, received its window of two units, and holds there
    while (!(local.calls > 0 && source.held.length >= 2 && source.held.every((h) => h.settled)))
      await new Promise<void>((r) => setTimeout(r, 1));
    await settle(60);
    expect(source.held).toHaveLength(2);
    expect(layer.state().fullyVerified).toBe(false);
    release();
    await layer.whenBackgroundDone();
    expect(layer.state()).toMatchObject({ fullyVerified: true, bad: false });
    expect(source.held.length).toBeGreaterThan(2);
  });

  it('a layer closed while its background pass waits for a disk that never settles closes', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const source = new HeldSource(fx.blob);
    source.auto = true;
    const local = new (class extends MemoryLocalBytes {
      calls = 0;
      settle(): Promise<void> {
        this.calls++;
        return new Promise<void>(() => undefined); // a hung disk
      }
    })(fx.blob.length);
    const layer = makeLayer(fx, source, {
      backgroundFetch: true,
      backgroundUnitBytes: 4096,
      expectedDiffID: fx.diffID,
      local,
    });
    layer.start();
    while (local.calls === 0) await new Promise<void>((r) => setTimeout(r, 1));
    await layer.close();
    await layer.whenBackgroundDone();
    expect(layer.state().fullyVerified).toBe(false);
  });

  it('a second layer on the same blob store re-verifies the DiffID from local bytes: zero network bytes', async () => {
    const fx = buildFixture(mixedSpecs(4096), 'zstd');
    const key = sha256(fx.blob);
    const run = async (): Promise<{ held: HeldSource; fetched: number }> => {
      const store = await BlobStore.open({ root });
      const blob = await store.openBlob(key, fx.blob.length);
      const source = new HeldSource(fx.blob);
      source.auto = true;
      const layer = makeLayer(fx, source, {
        backgroundFetch: true,
        expectedDiffID: fx.diffID,
        local: blob,
      });
      layer.start();
      await layer.whenBackgroundDone();
      expect(layer.state()).toMatchObject({ fullyVerified: true, bad: false });
      const fetched = layer.state().bytesFetched;
      await layer.close();
      await store.close();
      return { held: source, fetched };
    };
    const first = await run();
    expect(first.fetched).toBe(fx.blob.length);
    const second = await run();
    expect(second.fetched).toBe(0);
    expect(second.held.held).toHaveLength(0);
  });
});
