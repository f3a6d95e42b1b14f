import { ratio, summarize, type Summary } from '../lib/stats.js';
import type { IterationResult } from './modes.js';
import { parseNetwork } from './networks.js';

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
  /** Registry MB of the pull phase and of the run phase (after the pull, background fetch included). */
  pullRegistryMB: Summary;
  runRegistryMB: Summary;
  /** Registry bytes of the start window / compressed bytes of the image's layers. */
  registryPerBlob: Summary;
  /** model-load: cold (sha256sum) and warm (cat) read rates of the shard inside the container. */
  coldReadMBs: Summary;
  warmReadMBs: Summary;
  /** Per layer, in image order (from the runs that recorded layers). */
  layers: LayerSummary[];
  /** "k/n" layers served by the store (als modes), from the last successful run. */
  lazyLayers?: string;
  /** total p50 / full-gzip total p50 (same image and network). */
  vsFull?: number;
  /** total p50 / the baseline store's total p50 for the same format. */
  vsBaseline?: number;
}

export interface LayerSummary {
  digest: string;
  blobMB: number;
  /** Registry MB of this blob during the start window. */
  startMB: Summary;
  /** Our store's `layer resolved` ms (empty when the store does not log it). */
  resolveMs: Summary;
  /** --resolve-probe: lookup of the layer's diff on a fresh store, timed by the harness. */
  lookupMs: Summary;
}

function layerSummaries(ok: readonly IterationResult[]): LayerSummary[] {
  const first = ok.find((i) => i.layers)?.layers ?? [];
  return first.map((l) => {
    const per = ok.map((i) => i.layers?.find((x) => x.digest === l.digest)).filter((x) => x !== undefined);
    return {
      digest: l.digest,
      blobMB: l.blobBytes / 1e6,
      startMB: summarize(per.map((x) => x.startBytes / 1e6)),
      resolveMs: summarize(per.flatMap((x) => (x.resolveMs !== undefined ? [x.resolveMs] : []))),
      lookupMs: summarize(per.flatMap((x) => (x.lookupMs !== undefined ? [x.lookupMs] : []))),
    };
  });
}

const rate = (bytes: number | undefined, ms: number | undefined) =>
  bytes !== undefined && ms !== undefined && ms > 0 ? bytes / 1e6 / (ms / 1000) : undefined;

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
    pullRegistryMB: pick((i) => (i.pullRegistry ? i.pullRegistry.bytes / 1e6 : undefined)),
    runRegistryMB: pick((i) => (i.runRegistry ? i.runRegistry.bytes / 1e6 : undefined)),
    registryPerBlob: pick((i) =>
      i.registry && i.imageBlobBytes ? i.registry.bytes / i.imageBlobBytes : undefined,
    ),
    coldReadMBs: pick((i) => rate(i.readBytes, i.coldReadMs)),
    warmReadMBs: pick((i) => rate(i.readBytes, i.warmReadMs)),
    layers: layerSummaries(ok),
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
  /** Short name of the baseline store in table headers (default "Go"). */
  baselineName?: string;
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
  out.push(...renderBaselineComparison(s, meta.baselineName));
  const failures = s.filter((c) => c.reason);
  if (failures.length > 0) {
    out.push('## Failures', '');
    for (const c of failures) {
      out.push(`- **${c.image} / ${c.network} / ${c.mode}** (${c.status}): ${oneLine(c.reason!)}`);
    }
    out.push('');
  }
  const bt = baselineTargetChecks(s, meta.baselineName);
  if (bt.length > 0) {
    out.push('## Targets (issues 10 and 11)', '', '| check | target | measured | met |', '|---|---|---|---|');
    for (const t of bt) {
      out.push(
        `| ${t.what} | ${t.target} | ${t.measured} | ${t.met === undefined ? '–' : t.met ? 'yes' : 'no'} |`,
      );
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

/** One row of the ours-vs-baseline table (issue 10's shape): same image, network and format. */
export interface BaselineRow {
  image: string;
  network: string;
  format: string;
  ours?: CellSummary;
  base?: CellSummary;
  full?: CellSummary;
}

export function baselineRows(s: readonly CellSummary[]): BaselineRow[] {
  const rows: BaselineRow[] = [];
  const okCell = (image: string, network: string, mode: string) =>
    s.find((c) => c.image === image && c.network === network && c.mode === mode && c.okRuns > 0);
  for (const b of s) {
    if (!b.mode.startsWith('baseline-')) continue;
    const format = b.mode.slice('baseline-'.length);
    const ours = okCell(b.image, b.network, `lazy-${format}`);
    const base = b.okRuns > 0 ? b : undefined;
    const full = okCell(b.image, b.network, 'full-gzip');
    rows.push({
      image: b.image,
      network: b.network,
      format,
      ...(ours ? { ours } : {}),
      ...(base ? { base } : {}),
      ...(full ? { full } : {}),
    });
  }
  return rows;
}

const p50 = (v: Summary, d = 2) => (v.n === 0 ? '–' : f(v.p50, d));
const range = (v: Summary, d = 0) =>
  v.n === 0 ? '–' : v.n === 1 || f(v.min, d) === f(v.max, d) ? f(v.min, d) : `${f(v.min, d)}-${f(v.max, d)}`;
const triple = (c: CellSummary | undefined) =>
  c ? `${p50(c.pullS)} + ${p50(c.runS)} = ${p50(c.totalS)} s` : 'failed';
const pair = (a: string, b: string) => `${a} / ${b}`;

/** Worst (largest) per-layer resolution p50 of a cell, with every layer's p50 (ms). */
function resolveText(c: CellSummary | undefined, na: string): string {
  if (!c) return '–';
  const ls = c.layers.filter((l) => l.resolveMs.n > 0);
  if (ls.length === 0) return na;
  return ls.map((l) => f(l.resolveMs.p50, 0)).join(', ');
}

/** Per-layer lookup p50s of the probe, "a, b, c" (ms), or "–" when not probed. */
function lookupText(c: CellSummary | undefined): string {
  const ls = c?.layers.filter((l) => l.lookupMs.n > 0) ?? [];
  return ls.length === 0 ? '–' : ls.map((l) => f(l.lookupMs.p50, 0)).join(', ');
}

/**
 * Markdown: the issue-shaped ours-vs-baseline table (p50s; ranges min-max for bytes and RSS), the
 * per-layer figures, and the model-load read rates. Empty when no baseline mode ran.
 */
export function renderBaselineComparison(s: readonly CellSummary[], baselineName = 'Go'): string[] {
  const rows = baselineRows(s);
  const out: string[] = [];
  if (rows.length > 0) {
    out.push(
      `## Ours vs the baseline store (${baselineName})`,
      '',
      `p50 seconds; "registry MB" = registry response bytes from the start of the pull to 300 ms after the first run (ranges over runs); "run phase" = the part of it after the pull (start-up reads and background fetch while the container starts and runs); "reg/blob" = registry bytes / compressed image bytes; resolve ms = our store's \`layer resolved\` ms per layer: lookup to answer as the client saw it, 0 for a layer resolved ahead of its lookup (p50; the ${baselineName} store logs no such time: n/a); lookup ms (with --resolve-probe) = \`stat <mnt>/<ref>/<digest>/diff\` per layer in image order on a fresh store, timed by the harness the same way for both stores (p50; the first includes the manifest).`,
      '',
      `| image | network | format | ours: pull + run = total | ${baselineName}: pull + run = total | ratio ours/${baselineName} | registry MB during start, ours / ${baselineName} | run-phase MB, ours / ${baselineName} | reg/blob, ours / ${baselineName} | peak RSS MB, ours / ${baselineName} | resolve ms per layer (ours) | lookup ms per layer (probe), ours / ${baselineName} |`,
      '|---|---|---|---|---|---:|---|---|---|---|---|---|',
    );
    for (const r of rows) {
      const ratioText = x(ratio(r.ours?.totalS.p50, r.base?.totalS.p50));
      out.push(
        `| ${r.image} | ${r.network} | ${r.format} | ${triple(r.ours)} | ${triple(r.base)} | ${ratioText} | ${pair(r.ours ? range(r.ours.registryMB, 1) : '–', r.base ? range(r.base.registryMB, 1) : '–')} | ${pair(r.ours ? range(r.ours.runRegistryMB, 1) : '–', r.base ? range(r.base.runRegistryMB, 1) : '–')} | ${pair(r.ours ? p50(r.ours.registryPerBlob) : '–', r.base ? p50(r.base.registryPerBlob) : '–')} | ${pair(r.ours ? range(r.ours.storeRssMB) : '–', r.base ? range(r.base.storeRssMB) : '–')} | ${resolveText(r.ours, 'n/a')} | ${pair(lookupText(r.ours), lookupText(r.base))} |`,
      );
    }
    out.push('');
  }
  const withLayers = s.filter((c) => c.okRuns > 0 && c.layers.length > 0 && c.mode !== 'full-gzip');
  if (withLayers.length > 0) {
    out.push(
      '## Per layer (lazy modes)',
      '',
      "Registry MB of each blob during the start window (p50) against its compressed size, and our store's resolution ms (p50; n/a for a store that does not log it).",
      '',
      '| image | network | mode | layer | blob MB | fetched MB during start | fetched / blob | resolve ms | lookup ms (probe) |',
      '|---|---|---|---|---:|---:|---:|---:|---:|',
    );
    for (const c of withLayers) {
      if (!c.mode.startsWith('lazy-') && !c.mode.startsWith('baseline-')) continue;
      for (const l of c.layers) {
        out.push(
          `| ${c.image} | ${c.network} | ${c.mode} | ${l.digest.slice(7, 19)} | ${f(l.blobMB, 1)} | ${p50(l.startMB, 1)} | ${l.startMB.n > 0 && l.blobMB > 0 ? f(l.startMB.p50 / l.blobMB, 3) : '–'} | ${l.resolveMs.n > 0 ? f(l.resolveMs.p50, 0) : c.mode.startsWith('baseline-') ? 'n/a' : '–'} | ${l.lookupMs.n > 0 ? f(l.lookupMs.p50, 0) : '–'} |`,
        );
      }
    }
    out.push('');
  }
  const loads = s.filter((c) => c.okRuns > 0 && c.coldReadMBs.n > 0);
  if (loads.length > 0) {
    out.push(
      '## Model load (whole shard read at start)',
      '',
      'Cold = `cat` of the shard right after start, warm = `cat` of it again, then `sha256sum` checks every byte (untimed); MB/s inside the container (p50). Start + read = pull + first run; vs full = that total against a full pull + the same read.',
      '',
      '| image | network | mode | cold read MB/s | warm re-read MB/s | pull + run = total | vs full | peak RSS MB |',
      '|---|---|---|---:|---:|---|---:|---:|',
    );
    for (const c of loads) {
      out.push(
        `| ${c.image} | ${c.network} | ${c.mode} | ${p50(c.coldReadMBs, 0)} | ${p50(c.warmReadMBs, 0)} | ${triple(c)} | ${x(c.vsFull)} | ${range(c.storeRssMB)} |`,
      );
    }
    out.push('');
  }
  return out;
}

const maybe = (a: number | undefined, b: number | undefined, ok: (a: number, b: number) => boolean) =>
  a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) ? undefined : ok(a, b);

/**
 * Issue 10 (start-up vs the baseline, per network and format: total <= 0.9x, pull phase <= the
 * baseline's, registry bytes during the start <= 1.5x, peak RSS <= 150 MB) and issue 11 (model-load:
 * cold read >= 200 MB/s on loopback and >= 0.9x the link rate when shaped, warm re-read >= the
 * baseline's, start + read <= 0.5x a full pull + the same read), on whatever the run measured.
 */
export function baselineTargetChecks(s: readonly CellSummary[], baselineName = 'Go'): TargetCheck[] {
  const out: TargetCheck[] = [];
  for (const r of baselineRows(s)) {
    const where = `${r.image}, ${r.network}, ${r.format}`;
    const o = r.ours;
    const b = r.base;
    if (!r.image.endsWith('+model-load')) {
      out.push(
        {
          what: `${where}: total vs ${baselineName}`,
          target: '<= 0.9x',
          measured: x(ratio(o?.totalS.p50, b?.totalS.p50)),
          met: maybe(o?.totalS.p50, b?.totalS.p50, (a, c) => a <= 0.9 * c),
        },
        {
          what: `${where}: pull phase vs ${baselineName}`,
          target: `<= ${baselineName}`,
          measured: `${o ? f(o.pullS.p50) : '–'} vs ${b ? f(b.pullS.p50) : '–'} s`,
          met: maybe(o?.pullS.p50, b?.pullS.p50, (a, c) => a <= c),
        },
        {
          what: `${where}: registry bytes during start vs ${baselineName}`,
          target: '<= 1.5x',
          measured: x(ratio(o?.registryMB.p50, b?.registryMB.p50)),
          met: maybe(o?.registryMB.p50, b?.registryMB.p50, (a, c) => a <= 1.5 * c),
        },
      );
    } else {
      const link = parseNetwork(r.network);
      const want = link.rateMbit === undefined ? 200 : (0.9 * link.rateMbit) / 8;
      out.push(
        {
          what: `${where}: cold read of the shard`,
          target: `>= ${f(want, 1)} MB/s`,
          measured: o && o.coldReadMBs.n > 0 ? `${f(o.coldReadMBs.p50, 1)} MB/s` : 'not measured',
          met: maybe(o?.coldReadMBs.p50, want, (a, c) => a >= c),
        },
        {
          what: `${where}: warm re-read vs ${baselineName}`,
          target: `>= ${baselineName}`,
          measured: `${o ? p50(o.warmReadMBs, 0) : '–'} vs ${b ? p50(b.warmReadMBs, 0) : '–'} MB/s`,
          met: maybe(o?.warmReadMBs.p50, b?.warmReadMBs.p50, (a, c) => a >= c),
        },
        {
          what: `${where}: start + read vs full pull + read`,
          target: '<= 0.5x',
          measured: x(o?.vsFull),
          met: maybe(o?.vsFull, 0.5, (a, c) => a <= c),
        },
      );
    }
    out.push({
      what: `${where}: our peak RSS`,
      target: '<= 150 MB',
      measured: o && o.storeRssMB.n > 0 ? `${f(o.storeRssMB.max, 0)} MB (max)` : 'not measured',
      met: maybe(o?.storeRssMB.max, 150, (a, c) => a <= c),
    });
  }
  return out;
}

function oneLine(s: string): string {
  const t = s.replace(/\s+/g, ' ').replace(/\|/g, '\\|');
  return t.length > 400 ? t.slice(0, 400) + '…' : t;
}
