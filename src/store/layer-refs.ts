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

/** The key of one (ref, digest) pair in the use counts (and in status rows). */
export const useKey = (ref: string, digest: string): string => `${ref}\n${digest}`;

/**
 * The live counts. Signals may arrive before the saved counts have loaded: a `use` simply adds; a
 * `release` of a count not known yet is kept and taken off the saved count when it loads, so it is
 * not lost (the count would otherwise stay one too high for as long as the store runs).
 */
export class UseCounts {
  private readonly counts = new Map<string, RefEntry>();
  private loaded = false;
  private readonly earlyReleases = new Map<string, number>();

  get size(): number {
    return this.counts.size;
  }

  get(ref: string, digest: string): number {
    return this.counts.get(useKey(ref, digest))?.n ?? 0;
  }

  has(ref: string, digest: string): boolean {
    return this.counts.has(useKey(ref, digest));
  }

  entries(): RefEntry[] {
    return [...this.counts.values()];
  }

  /** Returns the new count. */
  use(ref: string, digest: string): number {
    const key = useKey(ref, digest);
    const c = this.counts.get(key) ?? { ref, digest, n: 0 };
    c.n++;
    this.counts.set(key, c);
    return c.n;
  }

  /** Returns the new count, or undefined when nothing was counted (and nothing may load). */
  release(ref: string, digest: string): number | undefined {
    const key = useKey(ref, digest);
    const c = this.counts.get(key);
    if (c === undefined || c.n === 0) {
      if (this.loaded) return undefined;
      this.earlyReleases.set(key, (this.earlyReleases.get(key) ?? 0) + 1);
      return 0;
    }
    // counts are hints (restarts and `podman system reset` lose them); never below zero. At zero
    // only the count goes: the layer stays resolvable for later lookups.
    c.n--;
    if (c.n === 0) this.counts.delete(key);
    return c.n;
  }

  /**
   * Add the saved counts (once), each minus the releases that arrived before it loaded (those
   * released a saved use: uses counted meanwhile are this run's own and stay).
   */
  load(saved: readonly RefEntry[]): void {
    for (const e of saved) {
      const key = useKey(e.ref, e.digest);
      const n = Math.max(0, e.n - (this.earlyReleases.get(key) ?? 0));
      if (n === 0) continue;
      const c = this.counts.get(key) ?? { ref: e.ref, digest: e.digest, n: 0 };
      c.n += n;
      this.counts.set(key, c);
    }
    this.earlyReleases.clear();
    this.loaded = true;
  }
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
