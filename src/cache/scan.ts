import { lstat, opendir, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../util/logger.js';
import type { CachePaths } from './paths.js';

export interface ScannedEntry {
  hex: string;
  size: number;
  mtimeMs: number;
}

const HEX64 = /^[0-9a-f]{64}$/;
const HEX2 = /^[0-9a-f]{2}$/;

/**
 * Walk `<cache>/chunks/sha256/xx/*` with async directory iteration (never blocks start-up; the
 * caller does not await it before serving). Files that cannot be chunks (bad names, wrong prefix
 * dir) are deleted: they would otherwise use disk outside the accounting.
 */
export async function scanChunks(
  paths: CachePaths,
  logger: Logger,
  shouldStop: () => boolean,
): Promise<ScannedEntry[]> {
  const out: ScannedEntry[] = [];
  let prefixes: string[];
  try {
    prefixes = await readdir(paths.chunks);
  } catch {
    return out;
  }
  for (const prefix of prefixes) {
    if (shouldStop()) break;
    if (!HEX2.test(prefix)) continue;
    const dir = join(paths.chunks, prefix);
    let handle;
    try {
      handle = await opendir(dir);
    } catch {
      continue;
    }
    for await (const ent of handle) {
      if (shouldStop()) break;
      const file = join(dir, ent.name);
      if (!ent.isFile() || !HEX64.test(ent.name) || !ent.name.startsWith(prefix)) {
        if (ent.isFile()) {
          logger.warn({ file }, 'removing stray file from chunk cache');
          await unlink(file).catch(() => undefined);
        }
        continue;
      }
      try {
        const st = await lstat(file);
        out.push({ hex: ent.name, size: st.size, mtimeMs: st.mtimeMs });
      } catch {
        // vanished meanwhile: nothing to account
      }
    }
  }
  return out;
}

/** Remove temp files left by a crashed process (ours are recognised by their instance prefix). */
export async function cleanTemp(paths: CachePaths, ownPrefix: string): Promise<number> {
  let removed = 0;
  let names: string[];
  try {
    names = await readdir(paths.tmp);
  } catch {
    return 0;
  }
  for (const name of names) {
    if (name.startsWith(ownPrefix)) continue;
    await unlink(join(paths.tmp, name)).then(
      () => removed++,
      () => undefined,
    );
  }
  return removed;
}

const yieldToLoop = (): Promise<void> => new Promise((r) => setImmediate(r));

/**
 * Scanned entries oldest first, for the LRU order after a restart. A bucket sort on mtime (4096
 * buckets across the observed range) is O(n) and yields regularly, so ordering a million entries
 * never stalls the event loop; order inside one bucket is arbitrary, which is fine for eviction.
 */
export async function orderByAge(found: ScannedEntry[], step = 50_000): Promise<ScannedEntry[]> {
  if (found.length < 2) return found;
  let min = Infinity;
  let max = -Infinity;
  for (const f of found) {
    if (f.mtimeMs < min) min = f.mtimeMs;
    if (f.mtimeMs > max) max = f.mtimeMs;
  }
  const n = Math.min(4096, found.length);
  const width = (max - min) / n || 1;
  const buckets: ScannedEntry[][] = Array.from({ length: n }, () => []);
  for (let i = 0; i < found.length; i++) {
    const f = found[i]!;
    buckets[Math.min(n - 1, Math.floor((f.mtimeMs - min) / width))]!.push(f);
    if (i % step === step - 1) await yieldToLoop();
  }
  const out: ScannedEntry[] = [];
  for (const b of buckets) for (const f of b) out.push(f);
  return out;
}

/** Build the index map from ordered entries, yielding every `step` entries. */
export async function buildIndexMap(
  ordered: ScannedEntry[],
  bytesOf: (size: number) => number,
  step = 50_000,
): Promise<Map<string, number>> {
  const map = new Map<string, number>();
  for (let i = 0; i < ordered.length; i++) {
    const f = ordered[i]!;
    map.set(f.hex, bytesOf(f.size));
    if (i % step === step - 1) await yieldToLoop();
  }
  return map;
}
