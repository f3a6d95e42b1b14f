import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../util/atomic-file.js';
import type { Logger } from '../util/logger.js';

/**
 * Use counts of layers (Podman's `use` file / rmdir signals) kept in `<root>/layer-refs.json`, so a
 * restarted store still knows which layers running containers hold: Podman does not signal `use`
 * again for containers that were already running. Writes are serialised and atomic; a failed write
 * is logged once and the counts stay right in memory.
 */
export interface RefEntry {
  ref: string;
  digest: string;
  n: number;
}

export function layerRefsPath(root: string): string {
  return join(root, 'layer-refs.json');
}

/** The saved counts; a missing or damaged file is an empty list (counts are hints, never fatal). */
export async function loadLayerRefs(root: string): Promise<RefEntry[]> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(layerRefsPath(root), 'utf8'));
  } catch {
    return [];
  }
  const refs = (parsed as { refs?: unknown } | null)?.refs;
  if (!Array.isArray(refs)) return [];
  return refs.filter(
    (e): e is RefEntry =>
      typeof (e as RefEntry | null)?.ref === 'string' &&
      typeof (e as RefEntry).digest === 'string' &&
      Number.isSafeInteger((e as RefEntry).n) &&
      (e as RefEntry).n > 0,
  );
}

/** Saves the latest counts after the previous write finished (a burst of signals writes at most twice). */
export class LayerRefsWriter {
  private writing: Promise<void> | undefined;
  private pending: RefEntry[] | undefined;
  private warned = false;

  constructor(
    private readonly root: string,
    private readonly log: Logger,
  ) {}

  save(entries: RefEntry[]): void {
    this.pending = entries.map((e) => ({ ref: e.ref, digest: e.digest, n: e.n }));
    this.writing ??= this.drain();
  }

  /** Resolves when everything asked so far is on disk (or failed and was logged). */
  async flush(): Promise<void> {
    while (this.writing !== undefined) await this.writing;
  }

  private async drain(): Promise<void> {
    try {
      while (this.pending !== undefined) {
        const refs = this.pending;
        this.pending = undefined;
        try {
          await writeFileAtomic(layerRefsPath(this.root), JSON.stringify({ version: 1, refs }) + '\n');
          this.warned = false;
        } catch (err) {
          if (!this.warned) this.log.warn({ err }, 'layer use counts not saved (kept in memory)');
          this.warned = true;
        }
      }
    } finally {
      this.writing = undefined;
    }
  }
}
