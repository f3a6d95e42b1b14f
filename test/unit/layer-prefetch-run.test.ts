/**
 * A prefetch pass's batching: batches of about `batchBytes` compressed bytes, at most `parallel`
 * in flight (the staged prefetch's decode pass runs one small batch at a time beside the
 * container's reads), every chunk exactly once, stage or load as asked.
 */
import { describe, expect, it } from 'vitest';
import type { ChunkLoader } from '../../src/layer/chunk-loader.js';
import { LayerStatus } from '../../src/layer/layer-status.js';
import { runPrefetch } from '../../src/layer/prefetch-run.js';
import type { Chunk } from '../../src/format/model.js';
import { silentLogger } from '../../src/util/logger.js';

const chunk = (i: number, size: number): Chunk => ({
  digest: `sha256:${i.toString(16).padStart(64, '0')}`,
  size,
  fileOffset: 0,
  compressedOffset: i * size,
  compressedEnd: (i + 1) * size,
  innerOffset: 0,
});

/** A loader whose calls wait until the test releases them, recording how many ran at once. */
function heldLoader() {
  const calls: Array<{ mode: string; chunks: readonly Chunk[]; release: () => void }> = [];
  let running = 0;
  let most = 0;
  const call = (mode: string) => (chunks: readonly Chunk[]) => {
    running++;
    most = Math.max(most, running);
    return new Promise<never[]>((resolve) => {
      calls.push({
        mode,
        chunks,
        release: () => {
          running--;
          resolve([]);
        },
      });
    });
  };
  const loader = { keepsBytes: true, stage: call('stage'), load: call('load') } as unknown as ChunkLoader;
  return { loader, calls, most: () => most };
}

async function drive(parallel: number, mode: 'stage' | 'load') {
  const chunks = Array.from({ length: 10 }, (_, i) => chunk(i, 256 * 1024));
  const { loader, calls, most } = heldLoader();
  const status = new LayerStatus(silentLogger, {});
  const done = runPrefetch({
    chunks,
    batchBytes: 1024 * 1024,
    parallel,
    loader,
    mode,
    status,
    signal: new AbortController().signal,
    logger: silentLogger,
    end: chunks.at(-1)!.compressedEnd,
  });
  let released = 0;
  for (;;) {
    await new Promise<void>((r) => setImmediate(r));
    if (released === calls.length) break;
    calls[released++]!.release();
  }
  await done;
  return { calls, most: most(), status };
}

describe('runPrefetch', () => {
  it.each([1, 2])(
    'keeps at most %i batch(es) in flight, each chunk in exactly one batch',
    async (parallel) => {
      const { calls, most, status } = await drive(parallel, 'load');
      expect(most).toBe(parallel);
      // 10 chunks of 256 KiB in batches of 1 MiB: 4 + 4 + 2
      expect(calls.map((c) => c.chunks.length)).toEqual([4, 4, 2]);
      expect(calls.every((c) => c.mode === 'load')).toBe(true);
      expect(status.prefetchDone).toBe(true);
    },
  );

  it('stages instead of loading when asked', async () => {
    const { calls } = await drive(2, 'stage');
    expect(calls.map((c) => c.mode)).toEqual(['stage', 'stage', 'stage']);
  });
});
