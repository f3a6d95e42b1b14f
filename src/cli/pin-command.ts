import type { Command } from 'commander';
import { readFile } from 'node:fs/promises';
import { controlRequest, DEFAULT_CONTROL_SOCKET } from '../store/control-socket.js';
import type { PinStatus } from '../store/pins.js';
import { StoreError } from '../util/errors.js';
import { formatBytes } from '../util/format-bytes.js';
import { startMultiProgress, type ProgressStream } from './progress.js';

/**
 * `stargz-store pin add|rm|list`: pinned image sets, managed by the running store over its control
 * socket. `add --wait` follows progress (a bar per image on a TTY) and exits 1 if any image failed.
 */

/** One ref per line; `#` starts a comment; blank lines are skipped. */
export function parsePinFile(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.replace(/#.*$/, '').trim())
    .filter((l) => l !== '');
}

export function formatPinList(pins: PinStatus[]): string {
  if (pins.length === 0) return 'no pinned images\n';
  const rows = [['REF', 'STATE', 'FETCHED', 'PERCENT', 'LAYERS', 'ERROR']];
  for (const p of pins) {
    const lazy = p.layers.filter((l) => l.lazy).length;
    rows.push([
      p.ref,
      p.state,
      `${formatBytes(p.bytesFetched)}/${formatBytes(p.totalBytes)}`,
      `${p.percent.toFixed(1)}%`,
      lazy === p.layers.length ? String(lazy) : `${lazy}/${p.layers.length} lazy`,
      p.error ?? '-',
    ]);
  }
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  return (
    rows
      .map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!))).join('  '))
      .join('\n') + '\n'
  );
}

interface Common {
  addr: string;
  json?: boolean;
}

async function list(addr: string): Promise<PinStatus[]> {
  const resp = await controlRequest(addr, { op: 'pinList' }, { timeoutMs: 10_000 });
  return (resp.pins ?? []) as PinStatus[];
}

/**
 * Follows the named pins until none is pending or fetching; returns the final states. `source` is
 * the store's control socket, or (tests) a function that lists the pins.
 */
export async function waitForPins(
  source: string | (() => Promise<PinStatus[]>),
  refs: string[],
  onProgress: (pins: PinStatus[]) => void,
  intervalMs = 500,
): Promise<PinStatus[]> {
  const listPins = typeof source === 'string' ? () => list(source) : source;
  for (;;) {
    const pins = (await listPins()).filter((p) => refs.includes(p.ref));
    onProgress(pins);
    if (pins.every((p) => p.state === 'pinned' || p.state === 'failed')) return pins;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** `pin add --wait`: one bar per image on a terminal `stream`, quiet otherwise. */
export async function waitForPinsWithProgress(
  source: string | (() => Promise<PinStatus[]>),
  refs: string[],
  stream: ProgressStream,
  intervalMs = 500,
): Promise<PinStatus[]> {
  const bars = startMultiProgress({ stream });
  try {
    return await waitForPins(
      source,
      refs,
      (ps) => {
        for (const p of ps) bars.set(p.ref, p.bytesFetched, p.totalBytes, p.state);
      },
      intervalMs,
    );
  } finally {
    bars.stop();
  }
}

export function registerPinCommands(program: Command): void {
  const pin = program.command('pin').description('pinned image sets: fetched ahead of time, never evicted');
  pin
    .command('add')
    .description('pin images (resolved, fetched, verified and kept by the running store)')
    .argument('[refs...]', 'image references')
    .option('-f, --file <file>', 'read refs from a file: one per line, # comments')
    .option('--platform <os/arch>', 'platform of an index to pin (default: the store platform)')
    .option('--wait', 'wait until every image is pinned or failed (exit 1 if any failed)')
    .option('--addr <sock>', 'control socket of the running store', DEFAULT_CONTROL_SOCKET)
    .option('--json', 'print JSON')
    .action(async (refsArg: string[], o: Common & { file?: string; platform?: string; wait?: boolean }) => {
      const refs = [
        ...refsArg,
        ...(o.file !== undefined ? parsePinFile(await readFile(o.file, 'utf8')) : []),
      ];
      if (refs.length === 0) throw new StoreError('E_INVALID_ARGUMENT', 'no image reference given');
      // the store resolves each manifest before answering (disk check): allow for a slow registry
      const resp = await controlRequest(
        o.addr,
        { op: 'pinAdd', refs, ...(o.platform !== undefined ? { platform: o.platform } : {}) },
        { timeoutMs: 120_000 },
      );
      let pins = resp.pins as PinStatus[];
      if (o.wait === true) {
        // --json is for scripts: no bars even on a terminal
        const stream: ProgressStream = o.json === true ? { write: () => true } : process.stderr;
        pins = await waitForPinsWithProgress(o.addr, refs, stream);
      }
      process.stdout.write(o.json === true ? `${JSON.stringify(pins, null, 2)}\n` : formatPinList(pins));
      if (o.wait === true && pins.some((p) => p.state === 'failed')) process.exitCode = 1;
    });
  pin
    .command('rm')
    .description('unpin images: their chunks become evictable again')
    .argument('<refs...>', 'image references')
    .option('--addr <sock>', 'control socket of the running store', DEFAULT_CONTROL_SOCKET)
    .action(async (refs: string[], o: Common) => {
      const resp = await controlRequest(o.addr, { op: 'pinRm', refs }, { timeoutMs: 10_000 });
      process.stdout.write(`unpinned ${resp.refs ?? 0} image(s)\n`);
    });
  pin
    .command('list')
    .description('pinned images and their state (pending, fetching, pinned, failed)')
    .option('--addr <sock>', 'control socket of the running store', DEFAULT_CONTROL_SOCKET)
    .option('--json', 'print JSON')
    .action(async (o: Common) => {
      const pins = await list(o.addr);
      process.stdout.write(o.json === true ? `${JSON.stringify(pins, null, 2)}\n` : formatPinList(pins));
    });
}
