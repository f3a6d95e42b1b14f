import { ratio, summarize, type Summary } from '../lib/stats.js';
import type { IterationResult } from './modes.js';

/** Aggregation of iterations into cells (image x network x mode) and the markdown report. Pure. */

export interface Cell {
  image: string;
  network: string;
  mode: string;
  label: string;
  format: string;
  iterations: IterationResult[];
  /** Set when the mode could not run at all (e.g. format not pushed). */
  skipped?: string;
}

export interface CellSummary {
  image: string;
  network: string;
  mode: string;
  label: string;
  status: 'ok' | 'failed' | 'partial' | 'skipped' | 'not run';
  reason?: string;
  okRuns: number;
  runs: number;
  pullS: Summary;
  runS: Summary;
  totalS: Summary;
  registryMB: Summary;
  requests: Summary;
  storeRssMB: Summary;
  storeCpuS: Summary;
  /** "k/n" layers served by the store (als modes), from the last successful run. */
  lazyLayers?: string;
  /** total p50 / full-gzip total p50 (same image and network). */
  vsFull?: number;
  /** total p50 / the baseline store's total p50 for the same format. */
  vsBaseline?: number;
}

export function summarizeCell(c: Cell): CellSummary {
  const ok = c.iterations.filter((i) => i.ok);
  const pick = (f: (i: IterationResult) => number | undefined) =>
    summarize(ok.map(f).filter((v): v is number => v !== undefined));
  const lastOk = ok[ok.length - 1];
  const firstErr = c.iterations.find((i) => !i.ok)?.error;
  const status: CellSummary['status'] = c.skipped
    ? 'skipped'
    : c.iterations.length === 0
      ? 'not run'
      : ok.length === 0
        ? 'failed'
        : ok.length < c.iterations.length
          ? 'partial'
          : 'ok';
  const reason = c.skipped ?? firstErr;
  return {
    image: c.image,
    network: c.network,
    mode: c.mode,
    label: c.label,
    status,
    ...(reason ? { reason } : {}),
    okRuns: ok.length,
    runs: c.iterations.length,
    pullS: pick((i) => (i.pullMs ?? NaN) / 1000),
    runS: pick((i) => (i.runMs ?? NaN) / 1000),
    totalS: pick((i) => (i.totalMs ?? NaN) / 1000),
    registryMB: pick((i) => (i.registry ? i.registry.bytes / 1e6 : undefined)),
    requests: pick((i) => i.registry?.requests),
    storeRssMB: pick((i) => (i.storePeakRssKiB !== undefined ? i.storePeakRssKiB / 1024 : undefined)),
    storeCpuS: pick((i) => (i.storeCpuMs !== undefined ? i.storeCpuMs / 1000 : undefined)),
    ...(lastOk?.totalLayers !== undefined
      ? { lazyLayers: `${lastOk.lazyLayers ?? 0}/${lastOk.totalLayers}` }
      : {}),
  };
}

/** Summaries with ratios filled in. */
export function summarizeAll(cells: readonly Cell[]): CellSummary[] {
  const s = cells.map(summarizeCell);
  const find = (image: string, network: string, mode: string) =>
    s.find((x) => x.image === image && x.network === network && x.mode === mode && x.okRuns > 0);
  for (const x of s) {
    if (x.okRuns === 0) continue;
    const full = find(x.image, x.network, 'full-gzip');
    const r = ratio(x.totalS.p50, full?.totalS.p50);
    if (r !== undefined) x.vsFull = r;
    if (x.mode.startsWith('lazy-')) {
      const base = find(x.image, x.network, x.mode.replace(/^lazy-/, 'baseline-'));
      const b = ratio(x.totalS.p50, base?.totalS.p50);
      if (b !== undefined) x.vsBaseline = b;
    }
  }
  return s;
}

const f = (v: number, d = 2) => (Number.isFinite(v) ? v.toFixed(d) : '–');
const pp = (s: Summary, d = 2) =>
  s.n === 0 ? '–' : s.n === 1 ? f(s.p50, d) : `${f(s.p50, d)} / ${f(s.p95, d)}`;
const x = (v: number | undefined) => (v === undefined ? '–' : `${v.toFixed(2)}x`);

export interface TargetCheck {
  what: string;
  target: string;
  measured: string;
  met: boolean | undefined;
}

/** The targets, evaluated on whatever the run measured. */
export function targetChecks(s: readonly CellSummary[], image = 'large'): TargetCheck[] {
  const out: TargetCheck[] = [];
  const lazy = s.filter((c) => c.image === image && c.mode.startsWith('lazy-') && c.okRuns > 0);
  for (const [network, limit] of [
    ['loopback', 0.15],
    ['100mbit-30ms', 0.1],
  ] as const) {
    const cells = lazy.filter((c) => c.network === network && c.vsFull !== undefined);
    const best = cells.sort((a, b) => a.vsFull! - b.vsFull!)[0];
    out.push({
      what: `${image}: lazy total vs full pull, ${network}`,
      target: `<= ${limit}x`,
      measured: best ? `${best.vsFull!.toFixed(3)}x (${best.mode})` : 'not measured',
      met: best ? best.vsFull! <= limit : undefined,
    });
  }
  for (const network of new Set(lazy.map((c) => c.network))) {
    const opt = lazy.find((c) => c.network === network && c.mode === 'lazy-esgz-opt');
    const plain = lazy.find((c) => c.network === network && c.mode === 'lazy-estargz');
    out.push({
      what: `${image}: optimised eStargz faster than unoptimised, ${network}`,
      target: 'opt < plain (total p50)',
      measured: opt && plain ? `${f(opt.totalS.p50)} s vs ${f(plain.totalS.p50)} s` : 'not measured',
      met: opt && plain ? opt.totalS.p50 < plain.totalS.p50 : undefined,
    });
  }
  return out;
}

export interface MarkdownMeta {
  title: string;
  lines: string[];
}

export function renderMarkdown(meta: MarkdownMeta, s: readonly CellSummary[]): string {
  const out: string[] = [`# ${meta.title}`, '', ...meta.lines, ''];
  const networks = [...new Set(s.map((c) => c.network))];
  out.push('Times in seconds, "p50 / p95" when more than one run. Ratios compare total p50s.', '');
  for (const n of networks) {
    out.push(`## Network: ${n}`, '');
    out.push(
      '| image | mode | pull s | first run s | total s | vs full | vs baseline | registry MB | requests | store RSS MB | store CPU s | lazy layers | runs |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    );
    for (const c of s.filter((c) => c.network === n)) {
      const runs = c.status === 'ok' ? `${c.okRuns}` : `${c.okRuns}/${c.runs} ${c.status}`;
      out.push(
        `| ${c.image} | ${c.mode} | ${pp(c.pullS)} | ${pp(c.runS)} | ${pp(c.totalS)} | ${x(c.vsFull)} | ${x(c.vsBaseline)} | ${pp(c.registryMB, 1)} | ${pp(c.requests, 0)} | ${pp(c.storeRssMB, 0)} | ${pp(c.storeCpuS)} | ${c.lazyLayers ?? '–'} | ${runs} |`,
      );
    }
    out.push('');
  }
  const failures = s.filter((c) => c.reason);
  if (failures.length > 0) {
    out.push('## Failures', '');
    for (const c of failures) {
      out.push(`- **${c.image} / ${c.network} / ${c.mode}** (${c.status}): ${oneLine(c.reason!)}`);
    }
    out.push('');
  }
  const checks = targetChecks(s);
  out.push('## Targets (issue 6)', '', '| check | target | measured | met |', '|---|---|---|---|');
  for (const t of checks) {
    out.push(
      `| ${t.what} | ${t.target} | ${t.measured} | ${t.met === undefined ? '–' : t.met ? 'yes' : 'no'} |`,
    );
  }
  out.push('');
  return out.join('\n');
}

function oneLine(s: string): string {
  const t = s.replace(/\s+/g, ' ').replace(/\|/g, '\\|');
  return t.length > 400 ? t.slice(0, 400) + '…' : t;
}
