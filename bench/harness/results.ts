import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { LinkCheck, ProxyOverhead } from './calibrate.js';
import type { HarnessOptions } from './options.js';
import { renderMarkdown, summarizeAll, type Cell } from './report.js';
import { renderChart } from './svg.js';

/** results.json of a run, and the markdown + chart written from it (also by render.ts, offline). */

export interface Results {
  version: 1;
  startedAt: string;
  finishedAt?: string;
  durationS?: number;
  complete: boolean;
  machine: Record<string, unknown>;
  options: Record<string, unknown>;
  workloads: Array<Record<string, unknown>>;
  calibration: {
    proxyOverhead?: ProxyOverhead | { error: string };
    links: Array<LinkCheck | { network: string; error: string }>;
  };
  summaries: ReturnType<typeof summarizeAll>;
  cells: Cell[];
  /** Stores that did not start in the preflight, with the reason (their modes were skipped). */
  storeFailures?: Record<string, string>;
}

export async function writeOutputs(
  o: Pick<HarnessOptions, 'out' | 'quick' | 'iterations' | 'images' | 'scale' | 'shaper'>,
  res: Results,
): Promise<void> {
  await mkdir(o.out, { recursive: true });
  res.summaries = summarizeAll(res.cells);
  await writeFile(join(o.out, 'results.json'), JSON.stringify(res, null, 2) + '\n');
  const m = res.machine;
  const prox = res.calibration.proxyOverhead;
  const lines = [
    `Run ${res.startedAt}${res.durationS !== undefined ? ` (${Math.round(res.durationS)} s)` : ''}${res.complete ? '' : ' — INCOMPLETE'}; ` +
      `${o.quick ? 'quick preset' : 'full preset'}; ${o.iterations} iteration(s); images ${o.images.join(', ')} (large scale ${o.scale}); shaper ${o.shaper}.`,
    `Machine: ${String(m.cpus)} x ${String(m.cpuModel)}, ${String(m.memGiB)} GiB RAM, kernel ${String(m.kernel)}, ${String(m.podman)}, node ${String(m.node)}.`,
    ...res.workloads.map(
      (w) =>
        `- image **${String(w.name)}**: ${(Number(w.uncompressedBytes) / 1e6).toFixed(0)} MB uncompressed, ${String(w.layers)} layer(s)` +
        (w.touchedBytes ? `, entrypoint reads ${(Number(w.touchedBytes) / 1e6).toFixed(1)} MB` : '') +
        `; compressed: ${Object.entries(
          w.images as Record<string, { compressedBytes?: number; error?: string }>,
        )
          .map(
            ([f, i]) => `${f} ${i.compressedBytes ? (i.compressedBytes / 1e6).toFixed(0) + ' MB' : 'FAILED'}`,
          )
          .join(', ')}`,
    ),
    prox && 'directMbit' in prox
      ? `Proxy overhead (loopback, ${(prox.bytes / 2 ** 20).toFixed(0)} MiB range, p50 of 3): direct ${prox.directMbit.toFixed(0)} Mbit/s, through the pass-through proxy ${prox.proxiedMbit.toFixed(0)} Mbit/s (${(prox.throughputLoss * 100).toFixed(1)} % loss); TTFB ${prox.directTtfbMs.toFixed(2)} vs ${prox.proxiedTtfbMs.toFixed(2)} ms.`
      : prox
        ? `Proxy overhead: not measured (${prox.error}).`
        : '',
    ...res.calibration.links.map((l) =>
      'error' in l
        ? `Link ${l.network}: check failed (${l.error}).`
        : `Link ${l.network}: target ${l.targetMbit ?? '∞'} Mbit/s / ${l.targetRttMs} ms RTT; measured ${l.achievedMbit.toFixed(1)} Mbit/s over ${(l.bytes / 1e6).toFixed(0)} MB, fresh-connection TTFB ${l.ttfbMs.toFixed(1)} ms (≈ 2 RTT expected).`,
    ),
    o.scale !== 1 && o.images.includes('large')
      ? `NB: the issue's targets are for the full-size large image (scale 1, 1.6 GB); this run used scale ${o.scale}.`
      : '',
  ].filter(Boolean);
  await writeFile(
    join(o.out, 'results.md'),
    renderMarkdown({ title: 'Container start-up benchmark', lines }, res.summaries),
  );
  await writeFile(
    join(o.out, 'chart.svg'),
    renderChart('Cold pull + first run (p50): lower is better', res.summaries),
  );
}
