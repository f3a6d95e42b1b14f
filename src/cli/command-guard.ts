import { stat } from 'node:fs/promises';
import { isAbsolute } from 'node:path';
import { StoreError } from '../util/errors.js';

/**
 * `serve` is the default command, so `stargz-store stauts` would mount a store at ./stauts (and take
 * the default control socket). A mountpoint operand must be an absolute path or an existing
 * directory; anything else is taken for a mistyped command.
 */
export async function checkMountpointOperand(operand: string, commands: readonly string[]): Promise<void> {
  if (isAbsolute(operand)) return;
  const st = await stat(operand).catch(() => undefined);
  if (st?.isDirectory() === true) return;
  const near = closest(operand, commands);
  throw new StoreError(
    'E_INVALID_ARGUMENT',
    near !== undefined
      ? `unknown command '${operand}' (did you mean '${near}'?)`
      : `unknown command '${operand}' (a mountpoint must be an absolute path or an existing directory)`,
    { operand },
  );
}

/** The command within edit distance 2 (at most a third of its length), if exactly one is nearest. */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = editDistance(word.toLowerCase(), c);
    if (d < bestD) {
      best = c;
      bestD = d;
    }
  }
  return best !== undefined && bestD <= Math.max(1, Math.min(2, Math.floor(best.length / 3)))
    ? best
    : undefined;
}

/** Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** A mountpoint that exists must be a directory (mkdir would say EEXIST for a regular file). */
export async function checkMountpointKind(mountpoint: string): Promise<void> {
  const st = await stat(mountpoint).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    // ENOTCONN etc.: a stale FUSE mount, cleared later by mountStore.
    return null;
  });
  if (st && !st.isDirectory()) {
    const kind = st.isFile() ? 'a regular file' : st.isSocket() ? 'a socket' : 'not a directory';
    throw new StoreError('E_INVALID_ARGUMENT', `mountpoint ${mountpoint} is ${kind}, not a directory`, {
      path: mountpoint,
    });
  }
}
