import type { Command } from 'commander';
import { controlRequest, DEFAULT_CONTROL_SOCKET } from '../store/control-socket.js';
import { formatBytes } from '../util/format-bytes.js';

/**
 * `stargz-store status [--addr SOCK] [--json] [--no-trunc]`: the operator's view of a running store,
 * asked over the control socket. One row per resolved layer: ref, digest, format, lazy or not (and
 * why), bytes fetched, percent, verified, references, last error.
 */

/** One layer as reported by the store (LayerStore.status()); every field optional for robustness. */
export interface LayerStatusRow {
  ref?: string;
  digest?: string;
  tocDigest?: string;
  blobDigest?: string;
  /** 'blob': looked up by layer digest (Podman < 5.1); 'toc': by TOC digest (newer clients). */
  matchedBy?: string;
  format?: string;
  lazy?: boolean;
  reason?: string;
  bytesFetched?: number;
  totalBytes?: number;
  percent?: number;
  verified?: boolean;
  lastError?: string | null;
  refs?: number;
}

export interface StoreStatus {
  pid?: number;
  mountpoint?: string;
  root?: string;
  startedAt?: string;
  layers: LayerStatusRow[];
}

/** Accepts the serve command's `{pid, mountpoint, layers}` or a bare layer array. */
export function normalizeStatus(raw: unknown): StoreStatus {
  if (Array.isArray(raw)) return { layers: raw as LayerStatusRow[] };
  if (raw !== null && typeof raw === 'object' && Array.isArray((raw as { layers?: unknown }).layers)) {
    return raw as StoreStatus;
  }
  return { layers: [] };
}

function shortDigest(d: string | undefined, trunc: boolean): string {
  if (d === undefined || d === '') return '-';
  if (!trunc) return d;
  const i = d.indexOf(':');
  return i >= 0 ? `${d.slice(0, i + 1)}${d.slice(i + 1, i + 13)}` : d.slice(0, 12);
}

function oneLine(s: string | null | undefined, max: number, trunc: boolean): string {
  if (s === undefined || s === null || s === '') return '-';
  const flat = s.replace(/\s+/g, ' ');
  return trunc && flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/**
 * Layers the store declines by design (no TOC, not a layer of the image, a media type it does not
 * serve): Podman pulls them normally, so they are a state, not an error. Matched on the resolver's
 * NotLazyError reasons.
 */
const BY_DESIGN: readonly [RegExp, string][] = [
  [/no TOC digest annotation|plain gzip\/zstd layer/, 'not lazy (no TOC): pulled normally'],
  [/^unsupported layer media type/, 'not lazy (media type): pulled normally'],
];

function lazyCell(l: LayerStatusRow, trunc: boolean): { lazy: string; byDesign: boolean } {
  if (l.lazy === true) return { lazy: 'yes', byDesign: false };
  if (l.lazy !== false) return { lazy: '-', byDesign: false };
  for (const [re, label] of BY_DESIGN)
    if (l.reason !== undefined && re.test(l.reason)) return { lazy: label, byDesign: true };
  return { lazy: `no (${oneLine(l.reason, 40, trunc)})`, byDesign: false };
}

/** Plain-text table, columns padded to their widest cell (so cells never run into each other). */
export function formatStatusTable(status: StoreStatus, opts: { trunc?: boolean } = {}): string {
  const trunc = opts.trunc ?? true;
  const head: string[] = [];
  if (status.pid !== undefined || status.mountpoint !== undefined) {
    head.push(
      `stargz-store pid ${status.pid ?? '?'} mounted at ${status.mountpoint ?? '?'}` +
        (status.startedAt !== undefined ? ` since ${status.startedAt}` : ''),
    );
  }
  if (status.layers.length === 0) return [...head, 'no layers resolved yet'].join('\n') + '\n';
  const rows: string[][] = [
    ['REF', 'DIGEST', 'FORMAT', 'LAZY', 'FETCHED', 'PERCENT', 'VERIFIED', 'REFS', 'LAST ERROR'],
  ];
  for (const l of status.layers) {
    const { lazy, byDesign } = lazyCell(l, trunc);
    // The resolver records a declined layer's reason as its last error too; it is not one.
    const lastError = byDesign && l.lastError === l.reason ? undefined : l.lastError;
    const fetched =
      l.totalBytes !== undefined
        ? `${formatBytes(l.bytesFetched)}/${formatBytes(l.totalBytes)}`
        : formatBytes(l.bytesFetched);
    rows.push([
      oneLine(l.ref, 48, trunc),
      shortDigest(l.digest, trunc),
      l.format ?? '-',
      lazy,
      fetched,
      l.percent !== undefined && Number.isFinite(l.percent) ? `${l.percent.toFixed(1)}%` : '-',
      l.verified === true ? 'yes' : l.verified === false ? 'no' : '-',
      l.refs !== undefined ? String(l.refs) : '-',
      oneLine(lastError, 60, trunc),
    ]);
  }
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const lines = rows.map((r) =>
    r
      .map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!)))
      .join('  ')
      .trimEnd(),
  );
  return [...head, ...lines].join('\n') + '\n';
}

export interface StatusOptions {
  addr: string;
  json?: boolean;
  trunc?: boolean;
  timeoutMs?: number;
}

/** Asks the running store and returns the text to print. Throws StoreError E_IO when it is not running. */
export async function runStatus(opts: StatusOptions): Promise<string> {
  const resp = await controlRequest(opts.addr, { op: 'status' }, { timeoutMs: opts.timeoutMs ?? 10_000 });
  const status = normalizeStatus(resp.status);
  if (opts.json === true) return `${JSON.stringify(status, null, 2)}\n`;
  return formatStatusTable(status, { trunc: opts.trunc ?? true });
}

export function registerStatusCommand(program: Command): void {
  program
    .command('status')
    .description('show every layer the running store has resolved (lazy or not, fetched, verified, errors)')
    .option('--addr <sock>', 'control socket of the running store', DEFAULT_CONTROL_SOCKET)
    .option('--json', 'print JSON instead of a table')
    .option('--no-trunc', 'do not shorten digests, refs and errors')
    .action(async (o: { addr: string; json?: boolean; trunc: boolean }) => {
      process.stdout.write(await runStatus({ addr: o.addr, json: o.json === true, trunc: o.trunc }));
    });
}
