import { randomBytes, randomInt } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import type { LazyLayer } from '../../src/layer/index.js';
import {
  DEFAULT_READ_AHEAD,
  FileReadAhead,
  ReadAheadBudget,
  chunkEndOf,
  fitToMemory,
  nextWindow,
  type ReadAheadPolicy,
} from '../../src/layer/read-ahead.js';
import type { ByteRange, ReadRangesOptions } from '../../src/util/blob-read.js';
import { buildFixture, mixedSpecs, TestSource, type Fixture } from './layer-fixture.js';
import { closeTempCache, fixtureLayer, openTempCache } from './layer-harness.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** A loader whose calls stay pending until the test settles them. */
class ManualLoader {
  calls: Array<{
    offset: number;
    length: number;
    signal: AbortSignal;
    progress: (fraction: number) => void;
    resolve: () => void;
    reject: (e: unknown) => void;
  }> = [];
  readonly load = (
    offset: number,
    length: number,
    signal: AbortSignal,
    progress: (fraction: number) => void,
  ): Promise<void> =>
    new Promise<void>((resolve, reject) =>
      this.calls.push({ offset, length, signal, progress, resolve, reject }),
    );
  get covered(): number {
    return this.calls.reduce((n, c) => Math.max(n, c.offset + c.length), 0);
  }
}

describe('nextWindow (growth policy)', () => {
  const p = DEFAULT_READ_AHEAD;

  it('starts only after the trigger, then grows 1 -> 4 -> 16 -> 64 MiB as the run consumes each window', () => {
    expect(nextWindow({ window: 0, runBytes: 0 }, p)).toBe(0);
    expect(nextWindow({ window: 0, runBytes: p.triggerBytes - 1 }, p)).toBe(0);
    expect(nextWindow({ window: 0, runBytes: p.triggerBytes }, p)).toBe(1 * MiB);
    expect(nextWindow({ window: 1 * MiB, runBytes: 1 * MiB - 1 }, p)).toBe(1 * MiB);
    expect(nextWindow({ window: 1 * MiB, runBytes: 1 * MiB }, p)).toBe(4 * MiB);
    expect(nextWindow({ window: 4 * MiB, runBytes: 5 * MiB }, p)).toBe(16 * MiB);
    expect(nextWindow({ window: 16 * MiB, runBytes: 16 * MiB }, p)).toBe(64 * MiB);
    // the largest size is the cap
    expect(nextWindow({ window: 64 * MiB, runBytes: 10_000 * MiB }, p)).toBe(64 * MiB);
  });

  it('never shrinks within a run and handles odd policies', () => {
    expect(nextWindow({ window: 16 * MiB, runBytes: 2 * MiB }, p)).toBe(16 * MiB);
    expect(nextWindow({ window: 0, runBytes: 100 * MiB }, { ...p, windows: [] })).toBe(0);
    expect(nextWindow({ window: 0, runBytes: 0 }, { ...p, triggerBytes: 0 })).toBe(1 * MiB);
  });
});

describe('fitToMemory', () => {
  it('caps the windows (and the in-flight bound) at half the memory LRU, so read-ahead never evicts itself', () => {
    const p = DEFAULT_READ_AHEAD;
    expect(fitToMemory(p, 128 * MiB).windows).toEqual([1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]);
    expect(fitToMemory(p, 32 * MiB)).toMatchObject({
      windows: [1 * MiB, 4 * MiB, 16 * MiB],
      maxInflightBytes: 12 * MiB,
    });
    expect(fitToMemory(p, 16 * MiB)).toMatchObject({
      windows: [1 * MiB, 4 * MiB, 8 * MiB],
      maxInflightBytes: 8 * MiB,
    });
    // never below one step; no memory LRU: unchanged
    expect(fitToMemory(p, 1 * MiB).windows).toEqual([1 * MiB, 4 * MiB]);
    expect(fitToMemory(p, 0)).toBe(p);
  });
});

describe('chunkEndOf', () => {
  it('finds the end of the chunk holding an offset', () => {
    const end = chunkEndOf([
      { fileOffset: 0, size: 10 },
      { fileOffset: 10, size: 5 },
      { fileOffset: 15, size: 100 },
    ]);
    expect([0, 9, 10, 14, 15, 114].map(end)).toEqual([10, 10, 15, 15, 115, 115]);
    expect(end(115)).toBe(116);
    expect(chunkEndOf([])(7)).toBe(8);
  });
});

describe('FileReadAhead (scheduling, with a manual loader)', () => {
  const policy: ReadAheadPolicy = {
    windows: [64 * KiB, 256 * KiB, 1 * MiB],
    triggerBytes: 32 * KiB,
    stepBytes: 64 * KiB,
    maxInflightBytes: 192 * KiB,
    slackBytes: 128 * KiB,
    earlyStartRoundTripMs: 10,
  };

  it('waits for the trigger, then keeps the window ahead within the in-flight bound', async () => {
    const l = new ManualLoader();
    const ra = new FileReadAhead(10 * MiB, l.load, { policy });
    ra.onRead(0, 16 * KiB);
    expect(l.calls).toHaveLength(0);
    ra.onRead(16 * KiB, 16 * KiB);
    // 32 KiB read: window 64 KiB ahead of the frontier, one step
    expect(l.calls.map((c) => [c.offset, c.length])).toEqual([[32 * KiB, 64 * KiB]]);
    for (let off = 32 * KiB; off < 320 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    const s = ra.stats();
    expect(s.window).toBe(1 * MiB);
    // the window wants more, but only maxInflightBytes may be in flight
    expect(s.inflightBytes).toBeLessThanOrEqual(policy.maxInflightBytes);
    expect(s.peakInflightBytes).toBeLessThanOrEqual(policy.maxInflightBytes);
    expect(l.calls.length).toBe(3);
    // steps are contiguous and start where the previous one ended
    for (let i = 1; i < l.calls.length; i++) {
      expect(l.calls[i]!.offset).toBe(l.calls[i - 1]!.offset + l.calls[i - 1]!.length);
    }
    // finishing one step lets the next start (pipelined, not in batches)
    l.calls[0]!.resolve();
    await new Promise((r) => setImmediate(r));
    expect(l.calls.length).toBe(4);
    ra.close();
    for (const c of l.calls) c.resolve();
    await ra.idle();
  });

  it('on a slow link, starts the next step as the running ones receive their bytes, never more than one step over the bound', async () => {
    const l = new ManualLoader();
    let now = 0;
    const ra = new FileReadAhead(10 * MiB, l.load, { policy, now: () => now });
    for (let off = 0; off < 320 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    expect(l.calls).toHaveLength(3); // 192 KiB in flight: the bound
    // no progress, or progress going backwards, changes nothing
    l.calls[0]!.progress(0);
    l.calls[0]!.progress(Number.NaN);
    expect(l.calls).toHaveLength(3);
    now += 30; // the first bytes took 30 ms: a slow link
    // half of every running step has arrived: 96 KiB still to come, room for one more step
    for (const c of l.calls.slice(0, 3)) c.progress(0.5);
    expect(l.calls).toHaveLength(4);
    expect(ra.stats().inflightRemainingBytes).toBe(96 * KiB + 64 * KiB);
    l.calls[0]!.progress(0.25); // backwards: ignored
    expect(ra.stats().inflightRemainingBytes).toBe(160 * KiB);
    // everything has arrived, but decoded bytes still take memory: the bound + one step at most
    for (const c of l.calls) c.progress(1);
    expect(l.calls).toHaveLength(4);
    expect(ra.stats().inflightBytes).toBe(policy.maxInflightBytes + policy.stepBytes);
    // a step settles: the next one starts
    l.calls[0]!.resolve();
    await new Promise((r) => setImmediate(r));
    expect(l.calls).toHaveLength(5);
    // progress of a settled step is ignored
    l.calls[0]!.progress(1);
    expect(ra.stats().peakInflightBytes).toBe(policy.maxInflightBytes + policy.stepBytes);
    ra.close();
    for (const c of l.calls) c.resolve();
    await ra.idle();
    expect(ra.stats()).toMatchObject({ inflightBytes: 0, inflightRemainingBytes: 0 });
  });

  it('on a fast link, a step starts only when a running one is done', async () => {
    const l = new ManualLoader();
    let now = 0;
    const ra = new FileReadAhead(10 * MiB, l.load, { policy, now: () => now });
    for (let off = 0; off < 320 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    expect(l.calls).toHaveLength(3);
    now += 2; // first bytes after 2 ms
    for (const c of l.calls) c.progress(1);
    expect(ra.stats().roundTripMs).toBe(2);
    expect(l.calls).toHaveLength(3); // everything arrived, nothing settled: still the bound
    l.calls[1]!.resolve();
    await new Promise((r) => setImmediate(r));
    expect(l.calls).toHaveLength(4);
    expect(ra.stats().peakInflightBytes).toBe(policy.maxInflightBytes);
    ra.close();
    for (const c of l.calls) c.resolve();
    await ra.idle();
  });

  it('never reads past EOF and rounds steps up to chunk ends', async () => {
    const l = new ManualLoader();
    const size = 200 * KiB;
    const chunks = [0, 50, 100, 150].map((k) => ({ fileOffset: k * KiB, size: 50 * KiB }));
    const ra = new FileReadAhead(size, l.load, {
      policy: { ...policy, maxInflightBytes: 10 * MiB },
      chunkEnd: chunkEndOf(chunks),
    });
    for (let off = 0; off < 96 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    for (const c of l.calls) {
      expect(c.offset + c.length).toBeLessThanOrEqual(size);
      // every step but the very first starts on a chunk boundary; all end on one
      expect((c.offset + c.length) % (50 * KiB)).toBe(0);
    }
    expect(l.covered).toBe(size);
    for (const c of l.calls) c.resolve();
    await ra.idle();
    ra.close();
  });

  it('loads nothing ahead while the reader stays inside the chunk its run started in', async () => {
    const l = new ManualLoader();
    // four chunks of 256 KiB (eStargz-like: far larger than the trigger)
    const chunks = [0, 1, 2, 3].map((k) => ({ fileOffset: k * 256 * KiB, size: 256 * KiB }));
    const ra = new FileReadAhead(MiB, l.load, { policy, chunkEnd: chunkEndOf(chunks) });
    // a header read of 160 KiB: past the trigger, but all of it in chunk 0 (fetched whole anyway)
    for (let off = 0; off < 160 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    expect(l.calls).toHaveLength(0);
    // the reader finishes chunk 0: read-ahead starts from there
    for (let off = 160 * KiB; off < 256 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    expect(l.calls.length).toBeGreaterThan(0);
    expect(l.calls[0]!.offset).toBe(256 * KiB);
    // a run starting mid-file (the old run's steps are signalled and settle) waits for the end
    // of its own first chunk
    ra.onRead(600 * KiB, 32 * KiB);
    for (const c of l.calls) c.resolve();
    await ra.idle();
    const before = l.calls.length;
    for (let off = 632 * KiB; off < 736 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    expect(l.calls.length).toBe(before);
    ra.onRead(736 * KiB, 32 * KiB);
    expect(l.calls.length).toBeGreaterThan(before);
    expect(l.calls[before]!.offset).toBe(768 * KiB);
    ra.close();
    for (const c of l.calls) c.resolve();
    await ra.idle();
  });

  it('a random access abandons the run: its steps are signalled, the window starts over', async () => {
    const l = new ManualLoader();
    const ra = new FileReadAhead(10 * MiB, l.load, { policy });
    for (let off = 0; off < 128 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    const before = l.calls.length;
    expect(before).toBeGreaterThan(0);
    ra.onRead(5 * MiB, 4 * KiB);
    expect(l.calls.every((c) => c.signal.aborted)).toBe(true);
    expect(ra.stats().window).toBe(0);
    expect(l.calls.length).toBe(before);
    // the abandoned steps hold their memory until they settle (aborted loads reject)
    for (const c of l.calls) c.reject(new Error('aborted'));
    await ra.idle();
    // a new sequential run at the new place reads ahead from there
    ra.onRead(5 * MiB + 4 * KiB, 32 * KiB);
    expect(l.calls.length).toBe(before + 1);
    expect(l.calls[before]!.offset).toBe(5 * MiB + 36 * KiB);
    expect(l.calls[before]!.signal.aborted).toBe(false);
    ra.close();
    l.calls[before]!.reject(new Error('aborted'));
    await ra.idle();
    expect(ra.stats().failed).toBe(0);
  });

  it('reads arriving out of order within the slack stay sequential', () => {
    const l = new ManualLoader();
    const ra = new FileReadAhead(10 * MiB, l.load, { policy });
    // the kernel's own read-ahead: a few requests at once, answered in any order
    for (const off of [0, 64, 32, 128, 96, 192, 160]) ra.onRead(off * KiB, 32 * KiB);
    expect(ra.stats().runBytes).toBe(224 * KiB);
    expect(ra.stats().window).toBe(256 * KiB);
    expect(l.calls.every((c) => !c.signal.aborted)).toBe(true);
    ra.close();
  });

  it('close(): nothing new starts, in-flight steps are signalled, failures are not reported', async () => {
    const l = new ManualLoader();
    const errors: unknown[] = [];
    const ra = new FileReadAhead(10 * MiB, l.load, { policy, onError: (e) => errors.push(e) });
    for (let off = 0; off < 128 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    const n = l.calls.length;
    expect(n).toBeGreaterThan(0);
    ra.close();
    expect(l.calls.every((c) => c.signal.aborted)).toBe(true);
    ra.onRead(128 * KiB, 32 * KiB);
    l.calls[0]!.resolve();
    for (const c of l.calls.slice(1)) c.reject(new Error('cancelled'));
    await ra.idle();
    expect(l.calls.length).toBe(n);
    expect(errors).toEqual([]);
    expect(ra.stats()).toMatchObject({ inflightBytes: 0, started: n, settled: n, failed: 0 });
  });

  it('a failed step of a live run is reported (not thrown) and read-ahead goes on', async () => {
    const l = new ManualLoader();
    const errors: unknown[] = [];
    const ra = new FileReadAhead(10 * MiB, l.load, { policy, onError: (e) => errors.push(e) });
    for (let off = 0; off < 64 * KiB; off += 32 * KiB) ra.onRead(off, 32 * KiB);
    l.calls[0]!.reject(new Error('registry down'));
    await new Promise((r) => setImmediate(r));
    expect(errors).toHaveLength(1);
    ra.onRead(64 * KiB, 32 * KiB);
    expect(l.calls.length).toBeGreaterThan(1);
    ra.close();
    for (const c of l.calls.slice(1)) c.resolve();
    await ra.idle();
  });

  it('a shared budget bounds the bytes in flight across files and wakes waiting files', async () => {
    const budget = new ReadAheadBudget(128 * KiB);
    const loaders = [new ManualLoader(), new ManualLoader(), new ManualLoader()];
    const files = loaders.map((l) => new FileReadAhead(10 * MiB, l.load, { policy, budget }));
    for (let off = 0; off < 512 * KiB; off += 32 * KiB) for (const f of files) f.onRead(off, 32 * KiB);
    const inflight = () => files.reduce((n, f) => n + f.stats().inflightBytes, 0);
    expect(inflight()).toBeLessThanOrEqual(128 * KiB);
    expect(budget.inUse).toBe(inflight());
    const starved = loaders.findIndex((l) => l.calls.length === 0);
    expect(starved).toBeGreaterThanOrEqual(0);
    // settle everything started so far: the starved file gets its turn
    for (const l of loaders) for (const c of l.calls) c.resolve();
    await new Promise((r) => setImmediate(r));
    expect(loaders[starved]!.calls.length).toBeGreaterThan(0);
    expect(inflight()).toBeLessThanOrEqual(128 * KiB);
    for (const f of files) f.close();
    for (const l of loaders) for (const c of l.calls) c.resolve();
    await Promise.all(files.map((f) => f.idle()));
    expect(budget.inUse).toBe(0);
  });
});

describe.each(['gzip', 'zstd'] as const)('read-ahead over a real LazyLayer (%s)', (compression) => {
  const chunkSize = 4096;
  let root: string;
  let cache: ChunkCache;
  const layers: LazyLayer[] = [];
  const policy: Partial<ReadAheadPolicy> = {
    windows: [8 * KiB, 32 * KiB, 128 * KiB],
    triggerBytes: 4 * KiB,
    stepBytes: 8 * KiB,
    maxInflightBytes: 24 * KiB,
    slackBytes: 8 * KiB,
  };

  beforeEach(async () => ({ root, cache } = await openTempCache('ra-test-')));
  afterEach(() => closeTempCache(layers, cache, root));

  function setup(fx: Fixture, source: TestSource): LazyLayer {
    const layer = fixtureLayer(fx, source, cache, { layerKey: 'sha256:' + 'cd'.repeat(32), prefetch: false });
    layers.push(layer);
    return layer;
  }

  function specs() {
    // odd sizes so reads straddle chunk and member boundaries; small files share members
    return [
      ...mixedSpecs(chunkSize),
      { path: 'model', content: randomBytes(chunkSize * 40 + 1111), chunkSize },
    ];
  }

  it('sequential and random reads interleaved return exactly the source bytes', async () => {
    const fx = buildFixture(specs(), compression);
    const l = setup(fx, new TestSource(fx.blob));
    for (const [path, content] of fx.files) {
      const node = fx.nodes.get(path)!;
      const ra = new FileReadAhead(node.size, (o, n, s) => l.prefetchRange(node, o, n, s), {
        policy,
        chunkEnd: chunkEndOf(node.chunks),
      });
      let seq = 0;
      const pieces: Buffer[] = [];
      while (seq < content.length) {
        // an odd read size: reads cross chunk (and member) boundaries
        const len = Math.min(content.length - seq, 3000);
        ra.onRead(seq, len);
        pieces.push(await l.read(node, seq, len));
        seq += len;
        if (randomInt(0, 4) === 0 && content.length > 0) {
          const off = randomInt(0, content.length);
          const n = randomInt(1, chunkSize * 2);
          ra.onRead(off, n);
          const got = await l.read(node, off, n);
          expect(got.equals(content.subarray(off, off + n)), `${path} random ${off}+${n}`).toBe(true);
        }
      }
      expect(Buffer.concat(pieces).equals(content), path).toBe(true);
      ra.close();
      await ra.idle();
    }
  });

  it('chunks read ahead are decoded once: the reader then finds them cached, no refetch', async () => {
    const fx = buildFixture(specs(), compression);
    const source = new TestSource(fx.blob);
    const l = setup(fx, source);
    const node = fx.nodes.get('model')!;
    const content = fx.files.get('model')!;
    const ra = new FileReadAhead(node.size, (o, n, s) => l.prefetchRange(node, o, n, s), {
      policy,
      chunkEnd: chunkEndOf(node.chunks),
    });
    const pieces: Buffer[] = [];
    for (let off = 0; off < content.length; off += 2048) {
      ra.onRead(off, 2048);
      pieces.push(await l.read(node, off, 2048));
      // let the read-ahead finish its current steps so the next reads can only hit the cache
      await ra.idle();
    }
    ra.close();
    expect(Buffer.concat(pieces).equals(content)).toBe(true);
    expect(ra.stats().started).toBeGreaterThan(0);
    // every member of the file fetched exactly once, whoever asked first
    const spans = new Set(node.chunks.map((c) => `${c.compressedOffset}:${c.compressedEnd}`));
    const fetched = source.requests.flat().map((r) => [r.offset, r.offset + r.length] as const);
    for (const key of spans) {
      const [a, b] = key.split(':').map(Number) as [number, number];
      expect(
        fetched.filter(([o, e]) => o <= a && e >= b),
        key,
      ).toHaveLength(1);
    }
  });

  it('a read-ahead cancelled by close settles without surfacing an error or leaking work', async () => {
    const fx = buildFixture(specs(), compression);
    const source = new TestSource(fx.blob);
    const l = setup(fx, source);
    const node = fx.nodes.get('model')!;
    const content = fx.files.get('model')!;
    let release!: () => void;
    source.gate = new Promise<void>((r) => (release = r));
    const errors: unknown[] = [];
    const ra = new FileReadAhead(node.size, (o, n, s) => l.prefetchRange(node, o, n, s), {
      policy,
      onError: (e) => errors.push(e),
    });
    ra.onRead(0, 2048);
    ra.onRead(2048, 4096);
    const started = ra.stats().started;
    expect(started).toBeGreaterThan(0);
    ra.close();
    // the reader goes on after close (another handle's reads): nothing new is read ahead
    ra.onRead(6144, 4096);
    release();
    source.gate = undefined;
    await ra.idle();
    expect(errors).toEqual([]);
    expect(ra.stats()).toMatchObject({ inflightBytes: 0, started, settled: started, failed: 0 });
    // only the steps already running reached the source: one request each at most
    expect(source.requestCount).toBeLessThanOrEqual(started);
    // the layer still serves the file correctly afterwards
    expect((await l.read(node, 0, content.length)).equals(content)).toBe(true);
  });

  it('prefetchRange skips cached chunks, does nothing once aborted, and past EOF', async () => {
    const fx = buildFixture(specs(), compression);
    const source = new TestSource(fx.blob);
    const l = setup(fx, source);
    const node = fx.nodes.get('model')!;
    const ac = new AbortController();
    ac.abort();
    await l.prefetchRange(node, 0, node.size, ac.signal);
    await l.prefetchRange(node, node.size, 100);
    expect(source.requestCount).toBe(0);
    await l.prefetchRange(node, 0, chunkSize * 2);
    expect(source.requestCount).toBe(1);
    await l.prefetchRange(node, 100, chunkSize);
    expect(source.requestCount).toBe(1);
    expect(cache.has(node.chunks[0]!.digest) && cache.has(node.chunks[1]!.digest)).toBe(true);
  });

  it("prefetchRange reports the share of its chunks' compressed bytes received, up to 1", async () => {
    const fx = buildFixture(specs(), compression);
    const source = new ArrivingSource(fx.blob);
    const l = setup(fx, source);
    const node = fx.nodes.get('model')!;
    const seen: number[] = [];
    await l.prefetchRange(node, chunkSize * 4, chunkSize * 3, undefined, (f) => seen.push(f));
    expect(source.requestCount).toBe(1);
    expect(seen.length).toBeGreaterThan(0);
    for (let i = 1; i < seen.length; i++) expect(seen[i]!).toBeGreaterThanOrEqual(seen[i - 1]!);
    expect(seen[seen.length - 1]).toBe(1);
    // chunks already cached: nothing fetched, nothing reported
    seen.length = 0;
    await l.prefetchRange(node, chunkSize * 4, chunkSize * 3, undefined, (f) => seen.push(f));
    expect(source.requestCount).toBe(1);
    expect(seen).toEqual([]);
  });
});

/** A TestSource that reports each range's bytes through onProgress before answering, as sockets do. */
class ArrivingSource extends TestSource {
  override async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    const bufs = await super.readRanges(ranges, opts);
    bufs.forEach((b, i) => {
      const half = Math.floor(b.length / 2);
      opts.onProgress?.(ranges[i]!.offset, b.subarray(0, half));
      opts.onProgress?.(ranges[i]!.offset + half, b.subarray(half));
    });
    return bufs;
  }
}
