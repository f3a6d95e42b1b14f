import type { Command } from 'commander';
import { stat } from 'node:fs/promises';
import { DEFAULT_ROOT } from '../store/config.js';
// The checker (format readers, cache scan) loads when the command runs: CLI start-up stays light.
import type { StoreCheckResult } from '../store/check.js';
import { StoreError } from '../util/errors.js';
import { formatBytes } from '../util/format-bytes.js';
import { controlRequest } from '../store/control-socket.js';
import { startProgress, type ProgressStream } from './progress.js';

/**
 * `stargz-store check [--root DIR] [--repair] [--json]`, with the store stopped: re-hashes every
 * cached chunk, validates every resolution record and saved TOC against its digest, names leftovers.
 * Exit 0 when clean (with --repair: when everything found was removed), 1 otherwise.
 */

export interface CheckCommandOptions {
  root: string;
  /** Ask the running store at this socket to do the check (temp files of live writes are skipped). */
  addr?: string;
  repair?: boolean;
  json?: boolean;
  /** Where the chunk bar goes (default stderr; drawn only on a terminal, never with --json). */
  progress?: ProgressStream;
}

export function formatCheck(r: StoreCheckResult): string {
  const lines: string[] = [];
  for (const p of r.problems) {
    lines.push(`${p.repaired ? 'REMOVED' : 'BAD'}  ${p.kind}  ${p.path}: ${p.detail}`);
  }
  const c = r.counts;
  const left = r.problems.filter((p) => !p.repaired).length;
  lines.push(
    `checked ${c.chunks ?? 0} chunks (${formatBytes(c.chunkBytes ?? 0)}), ${c.records ?? 0} layer records, ` +
      `${c.tocs ?? 0} saved TOCs, ${c.layerStates ?? 0} layer states under ${r.root}: ` +
      (r.problems.length === 0
        ? 'clean'
        : `${r.problems.length} problem(s)` +
          (r.repair ? `, ${r.problems.length - left} removed` : '; run with --repair to remove them')),
  );
  return lines.join('\n') + '\n';
}

/** Runs the check; returns the exit code and the text to print. */
export async function runCheck(o: CheckCommandOptions): Promise<{ code: number; output: string }> {
  if (o.addr !== undefined) {
    const resp = await controlRequest(
      o.addr,
      { op: 'check', repair: o.repair === true },
      { timeoutMs: 6 * 3600_000 },
    );
    const r = resp.check as StoreCheckResult;
    return {
      code: r.clean ? 0 : 1,
      output: o.json === true ? `${JSON.stringify(r, null, 2)}\n` : formatCheck(r),
    };
  }
  const st = await stat(o.root).catch(() => undefined);
  if (st === undefined || !st.isDirectory()) {
    throw new StoreError('E_CONFIG', `--root ${o.root} is not a directory`, { path: o.root });
  }
  const { checkStoreRoot } = await import('../store/check.js');
  const bar = startProgress('check: chunks', {
    stream: o.json === true ? { write: () => true } : (o.progress ?? process.stderr),
    unit: 'count',
  });
  let r: StoreCheckResult;
  try {
    r = await checkStoreRoot(o.root, {
      repair: o.repair === true,
      onChunk: (done, total) => bar.update(done, total),
    });
  } finally {
    bar.stop();
  }
  const output = o.json === true ? `${JSON.stringify(r, null, 2)}\n` : formatCheck(r);
  return { code: r.clean ? 0 : 1, output };
}

export function registerCheckCommand(program: Command): void {
  program
    .command('check')
    .description(
      'with the store stopped: re-hash cached chunks, verify layer records and saved TOCs, find leftovers',
    )
    .option('--root <dir>', 'state root of the store', DEFAULT_ROOT)
    .option('--repair', 'remove every bad item (it is fetched and verified again on next use)')
    .option('--json', 'print JSON instead of text')
    .option('--addr <sock>', 'ask the running store to check its own root (one chunk at a time)')
    .action(async (o: CheckCommandOptions) => {
      const { code, output } = await runCheck(o);
      process.stdout.write(output);
      process.exitCode = code;
    });
}
