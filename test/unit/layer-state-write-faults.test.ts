/**
 * Issue 14: a state directory that cannot be written (full, read-only, not a directory) costs one
 * warning store-wide, not one per layer; the layer stays verified in memory; a later success logs
 * "layer state writes resumed".
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { layerStateWriteFaults } from '../../src/util/write-faults.js';
import { captureLogger } from '../helpers/registry-log-capture.js';
import { buildFixture, mixedSpecs, TestSource } from './layer-fixture.js';

let root: string;
let cache: ChunkCache;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'layer-state-faults-'));
  cache = await ChunkCache.open({ root, minFreeBytes: 0 });
});
afterEach(async () => {
  await cache.close();
  await rm(root, { recursive: true, force: true });
});

it('one warning for many layers whose state cannot be saved; recovery logged once', async () => {
  const { logger, text } = captureLogger();
  const fx = buildFixture(mixedSpecs(4096), 'gzip');
  // a regular file where the state directory should be: every save fails (ENOTDIR / EEXIST)
  const blocked = join(root, 'blocked');
  await writeFile(blocked, 'not a directory');
  const run = async (stateDir: string, i: number): Promise<LazyLayer> => {
    const layer = new LazyLayer({
      index: fx.index,
      source: new TestSource(fx.blob),
      cache,
      layerKey: `sha256:${String(i).padStart(64, '0')}`,
      scheduler: new FetchScheduler({ quietMs: 0 }),
      backgroundFetch: true,
      expectedDiffID: fx.diffID,
      stateDir,
      logger,
    });
    layer.start();
    await layer.whenBackgroundDone();
    return layer;
  };
  const before = layerStateWriteFaults.stats().failures;
  const failed: LazyLayer[] = [];
  for (let i = 0; i < 5; i++) failed.push(await run(join(blocked, 'layers'), i));
  for (const l of failed) {
    // verification stands in memory even though it could not be persisted
    expect(l.state()).toMatchObject({ fullyVerified: true, bad: false });
    await l.close();
  }
  const records = (): Array<Record<string, unknown>> =>
    text()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const warnings = records().filter((r) => String(r.msg).startsWith('cannot persist layer state'));
  expect(warnings).toHaveLength(1);
  expect(layerStateWriteFaults.stats().failures - before).toBe(5);

  const ok = join(root, 'layers-ok');
  await mkdir(ok);
  await (await run(ok, 99)).close();
  expect(records().filter((r) => r.msg === 'layer state writes resumed')).toHaveLength(1);
  expect(layerStateWriteFaults.stats().failing).toEqual([]);
});
