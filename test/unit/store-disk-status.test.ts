/**
 * `status` after a restart: rows of layers resolved by an earlier run come from the root (records,
 * verified state, held bytes, saved use counts), and a live row never shows less than the disk knows.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { saveLayerState } from '../../src/layer/state-file.js';
import { diskLayerRows, mergeStatus } from '../../src/store/disk-status.js';
import { LayerRefsWriter, UseCounts, loadLayerRefs } from '../../src/store/layer-refs.js';
import { MetaStore } from '../../src/store/meta-store.js';
import type { LayerStatus } from '../../src/store/layer-store.js';
import type { LayerRecord } from '../../src/store/record.js';
import { rootLayout } from '../../src/util/root-layout.js';
import { silentLogger } from '../../src/util/logger.js';
import { layerRecord } from '../helpers/store.js';

const d = (c: string): string => `sha256:${c.repeat(64)}`;

const record = (ref: string, digest: string, blob: string, size: number): LayerRecord =>
  layerRecord(ref, digest, blob, size);

describe('status from the root', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'disk-status-'));
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('a verified layer is 100% verified; an unverified one shows the bytes held; refs come along', async () => {
    const meta = new MetaStore(root);
    await meta.putLayer(record('r/a:1', d('1'), d('a'), 4000));
    await meta.putLayer(record('r/b:1', d('2'), d('b'), 1000));
    const stateDir = rootLayout(root).layerState;
    await saveLayerState(stateDir, {
      layerKey: d('a'),
      diffID: d('f'),
      fullyVerified: true,
      verifiedAt: new Date(0).toISOString(),
    });
    // a damaged record is skipped, not fatal
    await writeFile(join(rootLayout(root).metadataLayers, `${'9'.repeat(64)}.json`), '{');
    const rows = await diskLayerRows({
      root,
      stateDir,
      coverage: (blob) => Promise.resolve(blob === d('b') ? 250 : undefined),
      refs: (ref) => (ref === 'r/a:1' ? 2 : 0),
    });
    const byRef = new Map(rows.map((r) => [r.ref, r]));
    expect(rows).toHaveLength(2);
    expect(byRef.get('r/a:1')).toMatchObject({
      verified: true,
      percent: 100,
      bytesFetched: 4000,
      totalBytes: 4000,
      refs: 2,
      format: 'estargz',
      lazy: true,
    });
    expect(byRef.get('r/b:1')).toMatchObject({ verified: false, percent: 25, bytesFetched: 250, refs: 0 });
  });

  it('a state verified against another diff_id does not count', async () => {
    await new MetaStore(root).putLayer(record('r/a:1', d('1'), d('a'), 4000));
    const stateDir = rootLayout(root).layerState;
    await saveLayerState(stateDir, {
      layerKey: d('a'),
      diffID: d('0'),
      fullyVerified: true,
      verifiedAt: new Date(0).toISOString(),
    });
    const [row] = await diskLayerRows({ root, stateDir, refs: () => 0 });
    expect(row).toMatchObject({ verified: false, percent: 0, bytesFetched: 0 });
  });

  it('merge: live rows keep their fields but never show less than the disk; disk-only rows follow', () => {
    const live: LayerStatus[] = [
      { ref: 'r/a:1', digest: d('1'), lazy: true, bytesFetched: 0, percent: 0, verified: false, refs: 1 },
      {
        ref: 'r/c:1',
        digest: d('3'),
        lazy: false,
        reason: 'resolving',
        bytesFetched: 0,
        percent: 0,
        verified: false,
        refs: 0,
      },
    ];
    const disk = [
      {
        ref: 'r/a:1',
        digest: d('1'),
        lazy: true,
        bytesFetched: 4000,
        totalBytes: 4000,
        percent: 100,
        verified: true,
        refs: 1,
      },
      {
        ref: 'r/b:1',
        digest: d('2'),
        lazy: true,
        bytesFetched: 10,
        totalBytes: 1000,
        percent: 1,
        verified: false,
        refs: 0,
      },
    ];
    const merged = mergeStatus(live, disk);
    expect(merged.map((r) => r.ref)).toEqual(['r/a:1', 'r/c:1', 'r/b:1']);
    // a restored use count of a layer not looked up yet: the disk row with that count
    const countOnly: LayerStatus = {
      ref: 'r/b:1',
      digest: d('2'),
      lazy: false,
      reason: 'not resolved',
      bytesFetched: 0,
      percent: 0,
      verified: false,
      refs: 3,
    };
    expect(mergeStatus([countOnly], disk)).toEqual([{ ...disk[1], refs: 3 }, disk[0]]);
    expect(merged[0]).toMatchObject({
      verified: true,
      percent: 100,
      bytesFetched: 4000,
      totalBytes: 4000,
      refs: 1,
    });
    expect(merged[1]).toEqual(live[1]);
  });
});

describe('layer use counts on disk', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'layer-refs-'));
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('the last saved counts load back; a damaged file loads as none', async () => {
    const w = new LayerRefsWriter(root, silentLogger);
    w.save([{ ref: 'r/a:1', digest: d('1'), n: 1 }]);
    w.save([{ ref: 'r/a:1', digest: d('1'), n: 2 }]);
    await w.flush();
    expect(await loadLayerRefs(root)).toEqual([{ ref: 'r/a:1', digest: d('1'), n: 2 }]);
    await writeFile(join(root, 'layer-refs.json'), '{"refs": [{"ref": 1}]');
    expect(await loadLayerRefs(root)).toEqual([]);
  });

  it('a failed write is logged once and does not throw', async () => {
    const warnings: string[] = [];
    const log = { ...silentLogger, warn: (_o: unknown, m?: string) => void warnings.push(String(m)) };
    const dir = join(root, 'missing-parent', 'x');
    const w = new LayerRefsWriter(dir, log as typeof silentLogger);
    w.save([{ ref: 'r', digest: d('1'), n: 1 }]);
    await w.flush();
    w.save([{ ref: 'r', digest: d('1'), n: 2 }]);
    await w.flush();
    expect(warnings).toEqual(['layer use counts not saved (kept in memory)']);
    await mkdir(dir, { recursive: true });
    w.save([{ ref: 'r', digest: d('1'), n: 3 }]);
    await w.flush();
    expect(await loadLayerRefs(dir)).toEqual([{ ref: 'r', digest: d('1'), n: 3 }]);
  });

  it('a release that arrives before the saved counts load is taken off them, not lost', () => {
    const c = new UseCounts();
    expect(c.use('r/a:1', d('2'))).toBe(1);
    expect(c.release('r/a:1', d('1'))).toBe(0);
    expect(c.release('r/a:1', d('1'))).toBe(0);
    c.load([
      { ref: 'r/a:1', digest: d('1'), n: 3 },
      { ref: 'r/a:1', digest: d('2'), n: 1 },
    ]);
    expect(c.get('r/a:1', d('1'))).toBe(1);
    expect(c.get('r/a:1', d('2'))).toBe(2);
    // once loaded, a release of nothing counted stays nothing (never below zero)
    expect(c.release('r/b:1', d('3'))).toBeUndefined();
    expect(c.release('r/a:1', d('1'))).toBe(0);
    expect(c.has('r/a:1', d('1'))).toBe(false);
    expect(c.entries()).toEqual([{ ref: 'r/a:1', digest: d('2'), n: 2 }]);
  });

  it("an early release only takes from the saved count, never from this run's uses", () => {
    const c = new UseCounts();
    c.release('r/a:1', d('1'));
    c.use('r/a:1', d('1'));
    c.release('r/b:1', d('2'));
    c.load([{ ref: 'r/b:1', digest: d('2'), n: 1 }]);
    expect(c.get('r/a:1', d('1'))).toBe(1);
    expect(c.get('r/b:1', d('2'))).toBe(0);
  });
});
