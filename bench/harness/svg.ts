import type { CellSummary } from './report.js';

/**
 * A self-contained SVG: one panel per network, one group per image, one horizontal bar per mode with
 * the p50 pull time and the p50 first-run time stacked. Pure string building, no dependencies.
 */

const W = 980;
const LABEL = 250;
const BAR = 560;
const ROW = 18;
const GAP = 12;
const PULL = '#3b6fb6';
const RUN = '#f29e38';

export function escapeXml(s: string): string {
  return s.replace(
    /[<>&'"]/g,
    (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c]!,
  );
}

/** A "nice" axis maximum (1, 2, 2.5 or 5 x 10^k) at or above v. Pure. */
export function niceMax(v: number): number {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

export function renderChart(title: string, cells: readonly CellSummary[]): string {
  const parts: string[] = [];
  let y = 40;
  const networks = [...new Set(cells.map((c) => c.network))];
  const body: string[] = [];
  for (const net of networks) {
    const inNet = cells.filter((c) => c.network === net);
    const max = niceMax(Math.max(0, ...inNet.filter((c) => c.okRuns > 0).map((c) => c.totalS.p50)) * 1.05);
    const scale = BAR / max;
    body.push(`<text x="10" y="${y + 14}" class="h">Network: ${escapeXml(net)}</text>`);
    y += 26;
    const axisTop = y;
    const gridAt = body.length;
    for (const image of [...new Set(inNet.map((c) => c.image))]) {
      body.push(`<text x="10" y="${y + 13}" class="img">${escapeXml(image)}</text>`);
      y += ROW;
      for (const c of inNet.filter((c) => c.image === image)) {
        body.push(
          `<text x="${LABEL - 6}" y="${y + 12}" class="lbl" text-anchor="end">${escapeXml(c.mode)}</text>`,
        );
        if (c.okRuns > 0) {
          const pw = Math.max(0, c.pullS.p50 * scale);
          const rw = Math.max(0, c.runS.p50 * scale);
          body.push(
            `<rect x="${LABEL}" y="${y + 2}" width="${pw.toFixed(1)}" height="${ROW - 5}" fill="${PULL}"><title>pull p50 ${c.pullS.p50.toFixed(2)} s</title></rect>`,
            `<rect x="${(LABEL + pw).toFixed(1)}" y="${y + 2}" width="${rw.toFixed(1)}" height="${ROW - 5}" fill="${RUN}"><title>first run p50 ${c.runS.p50.toFixed(2)} s</title></rect>`,
          );
          const ratioTxt =
            c.vsFull !== undefined && c.mode !== 'full-gzip' ? ` (${c.vsFull.toFixed(2)}x full)` : '';
          body.push(
            `<text x="${(LABEL + pw + rw + 5).toFixed(1)}" y="${y + 12}" class="val">${c.totalS.p50.toFixed(2)} s${ratioTxt}</text>`,
          );
        } else {
          body.push(`<text x="${LABEL + 4}" y="${y + 12}" class="fail">${escapeXml(c.status)}</text>`);
        }
        y += ROW;
      }
      y += 4;
    }
    // axis: ticks at quarters of the nice maximum; grid lines go under the bars
    const grid: string[] = [];
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4;
      const x = LABEL + v * scale;
      grid.push(`<line x1="${x.toFixed(1)}" y1="${axisTop}" x2="${x.toFixed(1)}" y2="${y}" class="grid"/>`);
      body.push(
        `<text x="${x.toFixed(1)}" y="${y + 12}" class="tick" text-anchor="middle">${+v.toFixed(2)} s</text>`,
      );
    }
    body.splice(gridAt, 0, ...grid);
    y += 20 + GAP;
  }
  const height = y + 10;
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" viewBox="0 0 ${W} ${height}" font-family="sans-serif">`,
    '<style>.h{font-size:15px;font-weight:bold}.img{font-size:13px;font-weight:bold}.lbl{font-size:12px}' +
      '.val{font-size:11px}.tick{font-size:10px;fill:#555}.fail{font-size:11px;fill:#b00}.grid{stroke:#ddd;stroke-width:1}</style>',
    `<rect width="${W}" height="${height}" fill="#fff"/>`,
    `<text x="10" y="20" font-size="16" font-weight="bold">${escapeXml(title)}</text>`,
    `<rect x="${W - 260}" y="8" width="12" height="12" fill="${PULL}"/><text x="${W - 244}" y="18" font-size="12">pull (p50)</text>`,
    `<rect x="${W - 160}" y="8" width="12" height="12" fill="${RUN}"/><text x="${W - 144}" y="18" font-size="12">first run (p50)</text>`,
    ...body,
    '</svg>',
    '',
  );
  return parts.join('\n');
}
