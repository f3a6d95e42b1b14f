/**
 * A preempted background unit keeps the bytes it received: they reach the local compressed store
 * while the unit streams, its next run reads them there and fetches only the rest, and every
 * compressed byte reaches the store exactly once.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { ProgressDelivery } from '../../src/layer/progress-delivery.js';
import type { BlobSource, ByteRange, ReadRangesOptions } from '../../src/layer/types.js';
import { buildFixture, MemoryLocalBytes, mixedSpecs, TestSource } from './layer-fixture.js';

/**
 * The first request streams the first half of its range, then hangs until it is aborted; later
 * requests are answered at once (with progress, like the registry reader's single-range answers).
 */
class StallingSource implements BlobSource {
  readonly requests: ByteRange[][] = [];
  streamedHalf: Promise<void>;
  private half!: () => void;

  constructor(private readonly blob: Buffer) {
    this.streamedHalf = new Promise((r) => (this.half = r));
  }

  get size(): number {
    return this.blob.length;
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    const [b] = await this.readRanges([{ offset, length }], { signal });
    return b!;
  }

  async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    this.requests.push(ranges.map((r) => ({ ...r })));
    if (this.requests.length === 1) {
      const r = ranges[0]!;
      const half = Math.floor(r.length / 2);
      // in two pieces, as a socket would deliver them
      opts.onProgress?.(r.offset, this.blob.subarray(r.offset, r.offset + 1000));
      opts.onProgress?.(r.offset + 1000, this.blob.subarray(r.offset + 1000, r.offset + half));
      this.half();
      return await new Promise<Buffer[]>((_, reject) => {
        const signal = opts.signal!;
        signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
      });
    }
    return ranges.map((r) => {
      opts.onProgress?.(r.offset, this.blob.subarray(r.offset, r.offset + r.length));
      return Buffer.from(this.blob.subarray(r.offset, r.offset + r.length));
    });
  }
}

describe('background fetch: a preempted unit keeps what it received', () => {
  const dirs: string[] = [];
  afterEach(async () => {
    for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  });

  it('the next run fetches only the rest; each byte reaches the local store once; DiffID verified', async () => {
    const root = await mkdtemp(join(tmpdir(), 'layer-stream-'));
    dirs.push(root);
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const fx = buildFixture(mixedSpecs(4096), 'gzip');
    const other = buildFixture(mixedSpecs(4096), 'gzip');
    const scheduler = new FetchScheduler({ quietMs: 0, bandwidthBytesPerSec: 0 });
    const source = new StallingSource(fx.blob);
    const local = new MemoryLocalBytes(fx.blob.length);
    const layer = new LazyLayer({
      index: fx.index,
      source,
      cache,
      layerKey: 'sha256:' + 'cd'.repeat(32),
      scheduler,
      expectedDiffID: fx.diffID,
      backgroundUnitBytes: 1 << 30,
      local,
    });
    // another layer of the same store: its on-demand read preempts the background unit
    const otherLayer = new LazyLayer({
      index: other.index,
      source: new TestSource(other.blob),
      cache,
      layerKey: 'sha256:' + 'ef'.repeat(32),
      scheduler,
      backgroundFetch: false,
    });
    try {
      layer.start();
      await source.streamedHalf;
      const half = Math.floor(fx.blob.length / 2);
      const big = other.nodes.get('big')!;
      expect((await otherLayer.read(big, 0, 100)).equals(other.files.get('big')!.subarray(0, 100))).toBe(
        true,
      );
      await layer.whenBackgroundDone();
      expect(layer.state()).toMatchObject({ fullyVerified: true, bad: false });
      // preempted once, then the rest only
      expect(source.requests).toHaveLength(2);
      expect(source.requests[0]).toEqual([{ offset: 0, length: fx.blob.length }]);
      expect(source.requests[1]).toEqual([{ offset: half, length: fx.blob.length - half }]);
      local.expectEachByteOnce(fx.blob.length);
      expect(layer.state().bytesFetched).toBe(fx.blob.length);
    } finally {
      await layer.close();
      await otherLayer.close();
      await cache.close();
    }
  });
});

describe('ProgressDelivery', () => {
  it('holds pieces back until they are large enough, then delivers only what the sink has not had', () => {
    const got: Array<[number, number]> = [];
    const d = new ProgressDelivery((o, b) => void got.push([o, b.length]), 100);
    const data = Buffer.alloc(300, 7);
    d.onProgress(0, data.subarray(0, 60));
    expect(got).toEqual([]);
    d.onProgress(60, data.subarray(60, 130));
    expect(got).toEqual([[0, 130]]);
    d.onProgress(130, data.subarray(130, 150));
    d.deliverRest(0, data);
    expect(got).toEqual([
      [0, 130],
      [130, 20],
      [150, 150],
    ]);
    expect(d.deliveredBytes).toBe(150);
  });

  it('settled() waits for every write the sink has not finished, failed ones included', async () => {
    const finish: Array<(ok: boolean) => void> = [];
    const d = new ProgressDelivery(
      () =>
        new Promise<void>((resolve, reject) =>
          finish.push((ok) => (ok ? resolve() : reject(new Error('disk full')))),
        ),
      100,
    );
    const data = Buffer.alloc(300, 1);
    d.onProgress(0, data.subarray(0, 150));
    d.deliverRest(0, data);
    expect(finish).toHaveLength(2);
    let done = false;
    const settled = d.settled().then(() => (done = true));
    finish[1]!(false);
    await new Promise<void>((r) => setImmediate(r));
    expect(done).toBe(false);
    finish[0]!(true);
    await settled;
    expect(done).toBe(true);
    // a sink that answers nothing has nothing to wait for
    const sync = new ProgressDelivery(() => undefined, 100);
    sync.deliverRest(0, data);
    await sync.settled();
  });

  it('delivers consecutive views of one buffer as one view of it, without copying', () => {
    const got: Buffer[] = [];
    const d = new ProgressDelivery((_o, b) => void got.push(b), 100);
    const data = Buffer.from(Array.from({ length: 300 }, (_, i) => i % 251));
    d.onProgress(0, data.subarray(0, 60));
    d.onProgress(60, data.subarray(60, 130));
    const other = Buffer.from(data.subarray(130, 160));
    d.onProgress(130, other);
    d.onProgress(160, data.subarray(160, 170));
    d.flush();
    expect(got).toHaveLength(2);
    expect(got[0]!.buffer).toBe(data.buffer);
    expect(got[0]!.equals(data.subarray(0, 130))).toBe(true);
    expect(got[1]!.equals(data.subarray(130, 170))).toBe(true);
  });
});
