/**
 * Issue 14, recovery after a hung registry: a read that stops waiting (deadline, interrupt) gives
 * its fetches up; a fetch nobody waits for any more is aborted (its request would otherwise sit on
 * a hung connection until the request timeout) and no later read joins it. A fetch another read
 * still waits for goes on.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { LazyLayer } from '../../src/layer/index.js';
import { buildFixture, mixedSpecs, TestSource, type Fixture } from './layer-fixture.js';
import { closeTempCache, fixtureLayer, node, openTempCache } from './layer-harness.js';

let root: string;
let cache: ChunkCache;
const layers: LazyLayer[] = [];

beforeEach(async () => ({ root, cache } = await openTempCache('layer-abandon-')));
afterEach(() => closeTempCache(layers, cache, root));

function makeLayer(fx: Fixture, source: TestSource, deadlineMs: number): LazyLayer {
  const layer = fixtureLayer(fx, source, cache, { deadlineMs });
  layers.push(layer);
  return layer;
}

describe.each(['gzip', 'zstd'] as const)('abandoned fetches (%s)', (compression) => {
  const chunkSize = 4096;

  it('rejects with E_DEADLINE when the source is slow; a fetch every reader gave up on is aborted', async () => {
    const fx = buildFixture(mixedSpecs(chunkSize), compression);
    const source = new TestSource(fx.blob);
    const signals: AbortSignal[] = [];
    const readRanges = source.readRanges.bind(source);
    source.readRanges = (ranges, o) => {
      signals.push(o.signal!);
      return readRanges(ranges, o);
    };
    let release!: () => void;
    source.gate = new Promise((r) => (release = r));
    const layer = makeLayer(fx, source, 100);
    const big = node(fx, 'big');
    const want = fx.files.get('big')!.subarray(0, 10);
    await expect(layer.read(big, 0, 10)).rejects.toMatchObject({ code: 'E_DEADLINE' });
    await expect(layer.read(big, 0, 10, { deadlineMs: 20 })).rejects.toMatchObject({ code: 'E_DEADLINE' });
    const ac = new AbortController();
    const aborted = layer.read(big, 0, 10, { signal: ac.signal });
    ac.abort();
    await expect(aborted).rejects.toMatchObject({ code: 'E_ABORTED' });
    // nobody waits any more: every request stopped (a hung registry would hold it until its
    // timeout), and no later read joins one of them
    expect(signals.length).toBeGreaterThan(0);
    await vi.waitFor(() => expect(signals.every((sig) => sig.aborted)).toBe(true));
    // while one reader still waits, another giving up does not stop the shared request
    const patient = layer.read(big, 0, 10, { deadlineMs: 60_000 });
    await expect(layer.read(big, 0, 10, { deadlineMs: 20 })).rejects.toMatchObject({ code: 'E_DEADLINE' });
    const n = signals.length;
    expect(signals[n - 1]!.aborted).toBe(false);
    release();
    source.gate = undefined;
    expect((await patient).equals(want)).toBe(true);
    expect(signals).toHaveLength(n);
    // cached now: no further request
    const requests = source.requestCount;
    expect((await layer.read(big, 0, 10)).equals(want)).toBe(true);
    expect(source.requestCount).toBe(requests);
  });
});
