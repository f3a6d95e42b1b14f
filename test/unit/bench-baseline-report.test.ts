import { describe, expect, it } from 'vitest';
import type { IterationResult, LayerStat } from '../../bench/harness/modes.js';
import {
  baselineRows,
  baselineTargetChecks,
  renderBaselineComparison,
  renderMarkdown,
  summarizeAll,
  type Cell,
} from '../../bench/harness/report.js';
import { MODEL_SHARD, modelLoadCmd, parseModelLoadOutput } from '../../bench/harness/workloads.js';
import { blobUsage, summarizeAccess } from '../../bench/lib/registry-server.js';

const D1 = `sha256:${'1'.repeat(64)}`;
const D2 = `sha256:${'2'.repeat(64)}`;

const usage = (mb: number) =>
  summarizeAccess([{ method: 'GET', path: '/v2/', status: 200, bytes: mb * 1e6, userAgent: '' }]);

function run(
  i: number,
  pullS: number,
  runS: number,
  o: { pullMB?: number; runMB?: number; rssMB?: number; layers?: LayerStat[]; cold?: number; warm?: number },
): IterationResult {
  const pullMB = o.pullMB ?? 0;
  const runMB = o.runMB ?? 0;
  return {
    iteration: i,
    ok: true,
    pullMs: pullS * 1000,
    runMs: runS * 1000,
    totalMs: (pullS + runS) * 1000,
    registry: usage(pullMB + runMB),
    pullRegistry: usage(pullMB),
    runRegistry: usage(runMB),
    imageBlobBytes: 100e6,
    ...(o.rssMB !== undefined ? { storePeakRssKiB: o.rssMB * 1024 } : {}),
    ...(o.layers ? { layers: o.layers } : {}),
    ...(o.cold !== undefined ? { coldReadMs: o.cold, warmReadMs: o.warm!, readBytes: 120e6 } : {}),
  };
}

const layers = (resolve1: number | undefined, mb1: number): LayerStat[] => [
  {
    digest: D1,
    blobBytes: 20e6,
    startBytes: mb1 * 1e6,
    startRequests: 3,
    ...(resolve1 !== undefined ? { resolveMs: resolve1 } : {}),
  },
  { digest: D2, blobBytes: 80e6, startBytes: 4e6, startRequests: 1 },
];

const cell = (image: string, network: string, mode: string, iterations: IterationResult[]): Cell => ({
  image,
  network,
  mode,
  label: mode,
  format: mode.replace(/^(lazy|baseline)-/, ''),
  iterations,
});

const cells: Cell[] = [
  cell('large', 'loopback', 'full-gzip', [run(1, 10, 1, { pullMB: 100 }), run(2, 12, 1, { pullMB: 100 })]),
  cell('large', 'loopback', 'lazy-estargz', [
    run(1, 2, 2, { pullMB: 30, runMB: 50, rssMB: 300, layers: layers(700, 10) }),
    run(2, 1, 2, { pullMB: 40, runMB: 60, rssMB: 250, layers: layers(500, 12) }),
  ]),
  cell('large', 'loopback', 'baseline-estargz', [
    run(1, 0.5, 1.5, { pullMB: 2, runMB: 10, rssMB: 50, layers: layers(undefined, 1) }),
    run(2, 0.5, 1.5, { pullMB: 2, runMB: 12, rssMB: 60, layers: layers(undefined, 1) }),
  ]),
  cell('large', 'loopback', 'lazy-zstd-chunked', [run(1, 1, 1, { rssMB: 200 })]),
  cell('large', 'loopback', 'baseline-zstd-chunked', [
    { iteration: 1, ok: false, error: 'the baseline store does not start' },
  ]),
  cell('large+model-load', 'loopback', 'full-gzip', [run(1, 10, 2, { pullMB: 100, cold: 1000, warm: 50 })]),
  cell('large+model-load', 'loopback', 'lazy-estargz', [
    run(1, 1, 5, { runMB: 130, rssMB: 400, cold: 4000, warm: 60 }),
  ]),
  cell('large+model-load', 'loopback', 'baseline-estargz', [
    run(1, 0.5, 8, { runMB: 120, rssMB: 90, cold: 6000, warm: 40 }),
  ]),
  cell('large+model-load', '100mbit-30ms', 'lazy-estargz', [
    run(1, 2, 10, { rssMB: 140, cold: 10_000, warm: 60 }),
  ]),
  cell('large+model-load', '100mbit-30ms', 'baseline-estargz', [run(1, 2, 20, { cold: 20_000, warm: 60 })]),
];

describe('ours vs baseline report', () => {
  const s = summarizeAll(cells);

  it('summarises phases, registry bytes per blob byte, per-layer bytes and resolution, read rates', () => {
    const ours = s.find((c) => c.image === 'large' && c.mode === 'lazy-estargz')!;
    expect(ours.pullRegistryMB.p50).toBeCloseTo(35, 9);
    expect(ours.runRegistryMB.p50).toBeCloseTo(55, 9);
    expect(ours.registryPerBlob.p50).toBeCloseTo(0.9, 9); // (80 + 100) / 2 MB over 100 MB of blobs
    expect(ours.layers.map((l) => l.digest)).toEqual([D1, D2]);
    expect(ours.layers[0]!.resolveMs.p50).toBe(600);
    expect(ours.layers[0]!.startMB.p50).toBeCloseTo(11, 9);
    expect(ours.layers[1]!.resolveMs.n).toBe(0);
    const load = s.find((c) => c.image === 'large+model-load' && c.mode === 'lazy-estargz')!;
    expect(load.coldReadMBs.p50).toBeCloseTo(30, 9); // 120 MB in 4 s
    expect(load.warmReadMBs.p50).toBeCloseTo(2000, 9);
  });

  it('pairs each baseline mode with our mode of the same image, network and format', () => {
    const rows = baselineRows(s);
    expect(rows.map((r) => [r.image, r.format, !!r.ours, !!r.base, !!r.full])).toEqual([
      ['large', 'estargz', true, true, true],
      ['large', 'zstd-chunked', true, false, true],
      ['large+model-load', 'estargz', true, true, true],
      ['large+model-load', 'estargz', true, true, false],
    ]);
  });

  it('renders the issue-shaped table with ratios and ours / Go pairs', () => {
    const md = renderBaselineComparison(s).join('\n');
    // ours p50: pull 1.5 + run 2 = 3.5 s; Go 0.5 + 1.5 = 2 s; ratio 1.75x
    expect(md).toContain(
      '| large | loopback | estargz | 1.50 + 2.00 = 3.50 s | 0.50 + 1.50 = 2.00 s | 1.75x | 80.0-100.0 / 12.0-14.0 | 50.0-60.0 / 10.0-12.0 | 0.90 / 0.13 | 250-300 / 50-60 | 600 |',
    );
    // a baseline that never ran is shown as failed, not as a ratio
    expect(md).toMatch(/\| large \| loopback \| zstd-chunked \| 1\.00 \+ 1\.00 = 2\.00 s \| failed \| – \|/);
    expect(md).toContain('## Per layer (lazy modes)');
    expect(md).toMatch(
      /\| large \| loopback \| baseline-estargz \| 111111111111 \| 20\.0 \| 1\.0 \| 0\.050 \| n\/a \|/,
    );
    expect(md).toContain('## Model load');
    expect(md).toMatch(
      /\| large\+model-load \| loopback \| lazy-estargz \| 30 \| 2000 \| 1\.00 \+ 5\.00 = 6\.00 s \| 0\.50x \|/,
    );
    // the comparison is part of the whole report
    expect(renderMarkdown({ title: 'T', lines: [], baselineName: 'Go' }, s)).toContain(
      '## Ours vs the baseline store (Go)',
    );
  });

  it('evaluates the targets of issues 10 and 11 per network and format', () => {
    const t = baselineTargetChecks(s);
    const get = (what: string) => t.find((c) => c.what === what)!;
    expect(get('large, loopback, estargz: total vs Go')).toMatchObject({ measured: '1.75x', met: false });
    expect(get('large, loopback, estargz: pull phase vs Go').met).toBe(false); // 1.5 vs 0.5 s
    expect(get('large, loopback, estargz: registry bytes during start vs Go')).toMatchObject({
      measured: '6.92x', // 90 / 13 MB
      met: false,
    });
    expect(get('large, loopback, estargz: our peak RSS').met).toBe(false); // 300 MB max
    // a missing baseline gives "not measurable", never a pass
    expect(get('large, loopback, zstd-chunked: total vs Go').met).toBeUndefined();
    // model-load: 120 MB in 4 s = 30 MB/s cold on loopback (target 200); warm 2000 vs 3000 MB/s
    expect(get('large+model-load, loopback, estargz: cold read of the shard')).toMatchObject({
      target: '>= 200.0 MB/s',
      met: false,
    });
    expect(get('large+model-load, loopback, estargz: warm re-read vs Go').met).toBe(false);
    expect(get('large+model-load, loopback, estargz: start + read vs full pull + read')).toMatchObject({
      measured: '0.50x',
      met: true,
    });
    // shaped link: 0.9 x 100 Mbit/s = 11.25 MB/s; 120 MB in 10 s = 12 MB/s
    expect(get('large+model-load, 100mbit-30ms, estargz: cold read of the shard')).toMatchObject({
      target: '>= 11.3 MB/s',
      met: true,
    });
    expect(get('large+model-load, 100mbit-30ms, estargz: our peak RSS').met).toBe(true);
    expect(
      get('large+model-load, 100mbit-30ms, estargz: start + read vs full pull + read').met,
    ).toBeUndefined();
    expect(renderMarkdown({ title: 'T', lines: [] }, s)).toContain('## Targets (issues 10 and 11)');
  });

  it('shows the probed lookup ms per layer for both stores', () => {
    const probed = (ms: number[]) => layers(undefined, 1).map((l, i) => ({ ...l, lookupMs: ms[i]! }));
    const p = summarizeAll([
      cell('large', 'loopback', 'lazy-estargz', [
        run(1, 1, 1, { layers: probed([400, 20]) }),
        run(2, 1, 1, { layers: probed([600, 40]) }),
      ]),
      cell('large', 'loopback', 'baseline-estargz', [run(1, 1, 1, { layers: probed([90, 3]) })]),
    ]);
    expect(p[0]!.layers.map((l) => l.lookupMs.p50)).toEqual([500, 30]);
    const md = renderBaselineComparison(p).join('\n');
    expect(md).toMatch(/\| 500, 30 \/ 90, 3 \|$/m);
    expect(md).toMatch(/\| large \| loopback \| baseline-estargz \| 111111111111 \| .* \| n\/a \| 90 \|$/m);
  });

  it('renders nothing for a run without baseline, layers or model loads', () => {
    expect(renderBaselineComparison(summarizeAll([cells[0]!]))).toEqual([]);
  });
});

describe('registry traffic per blob', () => {
  it('sums GETs of each blob, full or ranged, and ignores HEADs and manifests', () => {
    const u = blobUsage([
      { method: 'GET', path: `/v2/bench/large/blobs/${D1}`, status: 206, bytes: 100, userAgent: '' },
      { method: 'GET', path: `/v2/bench/large/blobs/${D1}?x=1`, status: 206, bytes: 50, userAgent: '' },
      { method: 'HEAD', path: `/v2/bench/large/blobs/${D2}`, status: 200, bytes: 0, userAgent: '' },
      { method: 'GET', path: '/v2/bench/large/manifests/estargz', status: 200, bytes: 900, userAgent: '' },
      { method: 'GET', path: `/v2/bench/large/blobs/${D2}`, status: 200, bytes: 7, userAgent: '' },
    ]);
    expect(u).toEqual({ [D1]: { requests: 2, bytes: 150 }, [D2]: { requests: 1, bytes: 7 } });
  });
});

describe('model-load workload', () => {
  it('times a cold and a warm read of the shard, then checks it with sha256sum', () => {
    const [sh, c, script = ''] = modelLoadCmd();
    expect([sh, c]).toEqual(['/bin/sh', '-c']);
    expect(script).toContain(`f=${MODEL_SHARD};`);
    expect(script.indexOf('cat "$f"')).toBeLessThan(script.indexOf('sha256sum "$f"'));
    expect(parseModelLoadOutput('abc  /m\nmodel-load cold-ns=2500000000 warm-ns=40000000\n')).toEqual({
      coldMs: 2500,
      warmMs: 40,
    });
    expect(parseModelLoadOutput('sh: 1: date: not found')).toBeUndefined();
  });
});
