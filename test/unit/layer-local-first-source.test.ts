import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BlobStore, type DiskBudget } from '../../src/cache/blob-store.js';
import { ChunkCache } from '../../src/cache/index.js';
import { IntervalSet } from '../../src/cache/interval-set.js';
import { LocalFirstSource } from '../../src/layer/local-first-source.js';
import { terminateCodec } from '../../src/format/codec.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import type { ByteRange, ReadRangesOptions } from '../../src/layer/types.js';
import { buildFixture, sha256, TestSource } from './layer-fixture.js';

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'local-first-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});
afterAll(async () => {
  await terminateCodec();
});

describe('LocalFirstSource', () => {
  it('serves stored bytes locally and fetches only the missing parts (property)', async () => {
    const size = 20_000;
    const blob = randomBytes(size);
    const range = fc
      .tuple(fc.integer({ min: 0, max: size - 1 }), fc.integer({ min: 0, max: 3000 }))
      .map(([offset, len]) => ({ offset, length: Math.min(len, size - offset) }));
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(range, { minLength: 1, maxLength: 4 }), { maxLength: 6 }),
        async (batches) => {
          const store = await BlobStore.open({ root: join(root, `r${run++}`), durable: false });
          const inner = new TestSource(blob);
          const b = await store.openBlob(sha256(blob), size);
          const src = new LocalFirstSource(inner, b, { maxGap: 0 });
          const model = new IntervalSet();
          for (const batch of batches) {
            let expectedNet = 0;
            const union = new IntervalSet();
            for (const r of batch) union.add(r.offset, r.offset + r.length);
            for (const iv of union.intervals())
              expectedNet += iv.end - iv.start - model.coveredBytes(iv.start, iv.end);
            const before = inner.bytes;
            const bufs = await src.readRanges(batch, {});
            batch.forEach((r, i) =>
              expect(bufs[i]!.equals(blob.subarray(r.offset, r.offset + r.length))).toBe(true),
            );
            // exactly the bytes not stored before, each once
            expect(inner.bytes - before).toBe(expectedNet);
            for (const iv of union.intervals()) model.add(iv.start, iv.end);
            expect(b.coverage()).toEqual(model.intervals());
          }
          await store.close();
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a small gap between missing parts is fetched with them (one request)', async () => {
    const blob = randomBytes(10_000);
    const store = await BlobStore.open({ root, durable: false });
    const inner = new TestSource(blob);
    const src = new LocalFirstSource(inner, await store.openBlob(sha256(blob), blob.length), { maxGap: 100 });
    await src.read(1000, 50);
    inner.requests = [];
    const out = await src.read(900, 300);
    expect(out.equals(blob.subarray(900, 1200))).toBe(true);
    expect(inner.requests).toEqual([[{ offset: 900, length: 300 }]]);
    expect(await src.read(900, 300)).toEqual(blob.subarray(900, 1200));
    expect(inner.requests.length).toBe(1);
    await store.close();
  });

  it('fresh drops the local bytes of the range and fetches them again', async () => {
    const blob = randomBytes(4000);
    const store = await BlobStore.open({ root, durable: false });
    const inner = new TestSource(blob);
    const b = await store.openBlob(sha256(blob), blob.length);
    // bad bytes stored locally (say, by a broken proxy)
    await b.write(0, Buffer.alloc(4000, 7));
    const src = new LocalFirstSource(inner, b);
    expect((await src.read(0, 4000)).equals(Buffer.alloc(4000, 7))).toBe(true);
    const [fresh] = await src.readRanges([{ offset: 0, length: 4000 }], { bypassCache: true });
    expect(fresh!.equals(blob)).toBe(true);
    expect(inner.fresh).toEqual([true]);
    expect((await b.read(0, 4000)).equals(blob)).toBe(true);
    await store.close();
  });

  it('still answers correctly when nothing can be stored', async () => {
    const blob = randomBytes(5000);
    const refuse: DiskBudget = { reserve: () => false, release: () => undefined };
    const store = await BlobStore.open({ root, budget: refuse });
    const inner = new TestSource(blob);
    const src = new LocalFirstSource(inner, await store.openBlob(sha256(blob), blob.length));
    const ranges: ByteRange[] = [
      { offset: 0, length: 100 },
      { offset: 50, length: 4950 },
    ];
    const [a, c] = await src.readRanges(ranges, {});
    expect(a!.equals(blob.subarray(0, 100))).toBe(true);
    expect(c!.equals(blob.subarray(50))).toBe(true);
    await store.close();
  });
});

/** A source that resolves `reached` once `threshold` bytes were requested from it. */
class TripwireSource extends TestSource {
  reached: Promise<void>;
  private fire!: () => void;
  constructor(
    blob: Buffer,
    private readonly threshold: number,
  ) {
    super(blob);
    this.reached = new Promise((r) => (this.fire = r));
  }
  override async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    const out = await super.readRanges(ranges, opts);
    if (this.bytes >= this.threshold) this.fire();
    return out;
  }
}

describe('LazyLayer over LocalFirstSource: every byte fetched once across a restart', () => {
  it.each([
    ['gzip', 0.1],
    ['gzip', 0.5],
    ['zstd', 0.5],
    ['zstd', 0.9],
  ] as const)(
    '%s, stopped after %s of the blob: <= 1.05x the blob to fully verified',
    async (compression, at) => {
      const chunkSize = 64 * 1024;
      const fx = buildFixture(
        [
          { path: 'a', content: randomBytes(chunkSize * 40 + 5), chunkSize },
          { path: 'b', content: randomBytes(1000), chunkSize },
          { path: 'c', content: randomBytes(chunkSize * 20), chunkSize },
        ],
        compression,
      );
      const stateDir = join(root, 'layers');
      const key = sha256(fx.blob);
      let network = 0;
      const runOnce = async (
        stopAt: number | undefined,
      ): Promise<{ fullyVerified: boolean; bad: boolean; onDemandOk: boolean }> => {
        const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
        const store = await BlobStore.open({
          root,
          budget: { reserve: (n) => cache.reserveExternal(n), release: (n) => cache.releaseExternal(n) },
        });
        const inner = new TripwireSource(fx.blob, stopAt ?? Infinity);
        const source = new LocalFirstSource(inner, await store.openBlob(key, fx.blob.length));
        const layer = new LazyLayer({
          index: fx.index,
          source,
          cache,
          layerKey: key,
          expectedDiffID: fx.diffID,
          scheduler: new FetchScheduler({ quietMs: 0 }),
          stateDir,
          backgroundUnitBytes: 128 * 1024,
          prefetch: false,
        });
        // an on-demand read first: the background pass must not fetch it again
        const b = await layer.read(fx.nodes.get('b')!, 0, 1000);
        layer.start();
        if (stopAt !== undefined) {
          await Promise.race([inner.reached, layer.whenBackgroundDone()]);
        } else {
          await layer.whenBackgroundDone();
        }
        const st = layer.state();
        await layer.close();
        network += inner.bytes;
        await store.close();
        await cache.close();
        return { fullyVerified: st.fullyVerified, bad: st.bad, onDemandOk: b.equals(fx.files.get('b')!) };
      };
      const first = await runOnce(Math.floor(fx.blob.length * at));
      expect(first.onDemandOk).toBe(true);
      expect(first.fullyVerified).toBe(false);
      const second = await runOnce(undefined);
      expect(second).toEqual({ fullyVerified: true, bad: false, onDemandOk: true });
      expect(network).toBeGreaterThanOrEqual(fx.blob.length);
      expect(network).toBeLessThanOrEqual(1.05 * fx.blob.length);
    },
  );
});
