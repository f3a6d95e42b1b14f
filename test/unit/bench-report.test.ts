import { describe, expect, it } from 'vitest';
import type { IterationResult } from '../../bench/harness/modes.js';
import { renderMarkdown, summarizeAll, targetChecks, type Cell } from '../../bench/harness/report.js';
import { escapeXml, niceMax, renderChart } from '../../bench/harness/svg.js';

const usage = (bytes: number, requests: number) => ({
  requests,
  bytes,
  blobRequests: requests,
  blobBytes: bytes,
  byClient: {},
});

function it_(i: number, pullS: number, runS: number, extra: Partial<IterationResult> = {}): IterationResult {
  return {
    iteration: i,
    ok: true,
    pullMs: pullS * 1000,
    runMs: runS * 1000,
    totalMs: (pullS + runS) * 1000,
    registry: usage(1e6 * (pullS + runS), 10),
    ...extra,
  };
}

function cell(
  image: string,
  network: string,
  mode: string,
  iterations: IterationResult[],
  skipped?: string,
): Cell {
  return { image, network, mode, label: mode, format: mode, iterations, ...(skipped ? { skipped } : {}) };
}

const cells: Cell[] = [
  cell('large', 'loopback', 'full-gzip', [it_(1, 18, 2), it_(2, 28, 2), it_(3, 38, 2)]),
  cell('large', 'loopback', 'lazy-estargz', [
    it_(1, 1, 3, { lazyLayers: 3, totalLayers: 3, storePeakRssKiB: 204800, storeCpuMs: 1500 }),
    it_(2, 1, 4, { lazyLayers: 3, totalLayers: 3, storePeakRssKiB: 102400, storeCpuMs: 500 }),
  ]),
  cell('large', 'loopback', 'lazy-esgz-opt', [it_(1, 1, 1), it_(2, 1, 2)]),
  cell('large', 'loopback', 'baseline-estargz', [it_(1, 2, 8)]),
  cell('large', 'loopback', 'lazy-zstd-chunked', [
    { iteration: 1, ok: false, error: 'store exited before mounting | with a pipe' },
  ]),
  cell('large', 'loopback', 'partial-zstd-chunked', [], 'format zstd-chunked not available: boom'),
  cell('large', '100mbit-30ms', 'full-gzip', [it_(1, 100, 2)]),
  cell('large', '100mbit-30ms', 'lazy-esgz-opt', [it_(1, 5, 2)]),
];

describe('bench report', () => {
  const s = summarizeAll(cells);
  const get = (network: string, mode: string) => s.find((c) => c.network === network && c.mode === mode)!;

  it('summarises the successful runs of each cell', () => {
    const full = get('loopback', 'full-gzip');
    expect(full.status).toBe('ok');
    expect(full.totalS.p50).toBe(30); // totals 20, 30, 40
    expect(full.pullS.p50).toBe(28);
    const lazy = get('loopback', 'lazy-estargz');
    expect(lazy.totalS.p50).toBe(4.5); // totals 4 and 5
    expect(lazy.storeRssMB.max).toBe(200);
    expect(lazy.storeCpuS.p50).toBe(1);
    expect(lazy.lazyLayers).toBe('3/3');
  });

  it('computes ratios against the full pull and the baseline store of the same image and network', () => {
    expect(get('loopback', 'lazy-estargz').vsFull).toBeCloseTo(4.5 / 30, 12);
    expect(get('loopback', 'lazy-estargz').vsBaseline).toBeCloseTo(4.5 / 10, 12);
    expect(get('loopback', 'lazy-esgz-opt').vsBaseline).toBeUndefined();
    expect(get('100mbit-30ms', 'lazy-esgz-opt').vsFull).toBeCloseTo(7 / 102, 12);
    expect(get('loopback', 'full-gzip').vsFull).toBe(1);
  });

  it('keeps failures and skips with their reasons', () => {
    const failed = get('loopback', 'lazy-zstd-chunked');
    expect(failed.status).toBe('failed');
    expect(failed.reason).toContain('store exited');
    expect(failed.vsFull).toBeUndefined();
    expect(get('loopback', 'partial-zstd-chunked').status).toBe('skipped');
  });

  it('evaluates the issue targets from what was measured', () => {
    const t = targetChecks(s);
    const loop = t.find((x) => x.what.includes('vs full pull, loopback'))!;
    // best lazy mode on loopback: esgz-opt, total 2.5 s vs 30 s
    expect(loop.met).toBe(true);
    expect(loop.measured).toContain('lazy-esgz-opt');
    const slow = t.find((x) => x.what.includes('vs full pull, 100mbit'))!;
    expect(slow.met).toBe(true); // 7/102 < 0.1
    const opt = t.find((x) => x.what.includes('optimised') && x.what.includes('loopback'))!;
    expect(opt.met).toBe(true); // 2.5 < 4.5
  });

  it('renders a markdown table per network with a failures section', () => {
    const md = renderMarkdown({ title: 'T', lines: ['machine line'] }, s);
    expect(md).toContain('## Network: loopback');
    expect(md).toContain('## Network: 100mbit-30ms');
    expect(md).toMatch(
      /\| large \| lazy-estargz \| 1\.00 \/ 1\.00 \| 3\.50 \/ 3\.95 \| 4\.50 \/ 4\.95 \| 0\.15x \| 0\.45x \|/,
    );
    expect(md).toContain('## Failures');
    // a pipe inside a reason must not break the table syntax
    expect(md).toContain('store exited before mounting \\| with a pipe');
    expect(md).toContain('machine line');
  });
});

describe('bench chart', () => {
  const s = summarizeAll(cells);
  const svg = renderChart('chart <title> & "quotes"', s);

  it('stacks pull and first-run bars in proportion to their p50s', () => {
    const rect = (title: string) => {
      const m = new RegExp(`width="([\\d.]+)"[^>]*><title>${title}`).exec(svg);
      return m ? Number(m[1]) : NaN;
    };
    // lazy-estargz: pull p50 1 s, run p50 3.5 s on the same axis
    const pull = rect('pull p50 1.00 s');
    const run = rect('first run p50 3.50 s');
    expect(run / pull).toBeCloseTo(3.5, 1);
    expect(svg).toContain('>failed<');
    expect(svg).toContain('>skipped<');
  });

  it('escapes text and produces one svg element', () => {
    expect(svg).toContain('chart &lt;title&gt; &amp; &quot;quotes&quot;');
    expect(svg.match(/<svg /g)?.length).toBe(1);
    expect(svg.trim().endsWith('</svg>')).toBe(true);
    expect(escapeXml(`<a href='x'>&</a>`)).toBe('&lt;a href=&apos;x&apos;&gt;&amp;&lt;/a&gt;');
  });

  it('picks nice axis maxima at or above the value', () => {
    expect(niceMax(0)).toBe(1);
    for (const v of [0.3, 1, 7, 23, 99, 101, 2.6e4]) {
      const n = niceMax(v);
      expect(n).toBeGreaterThanOrEqual(v);
      expect(n).toBeLessThanOrEqual(v * 2.5 + 1e-9);
      const mant = n / 10 ** Math.floor(Math.log10(n));
      expect([1, 2, 2.5, 5]).toContain(+mant.toFixed(6));
    }
  });
});
