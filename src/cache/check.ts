import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { opendir, readdir, rm, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CachePaths } from './paths.js';

/**
 * Offline check of the chunk cache (`stargz-store check`, store stopped): every chunk file is
 * re-hashed against its name; anything else under the cache (files with names that cannot be
 * chunks, temp files of a crashed writer) is a leftover. With `repair`, every bad item is deleted,
 * so the chunk is simply fetched (and verified) again on its next read.
 */

/** Stable problem kinds of the `check --json` output (documented in README.md). */
export type CheckProblemKind =
  | 'chunk-corrupt'
  | 'chunk-unreadable'
  | 'stray-file'
  | 'temp-file'
  | 'record-invalid'
  | 'toc-invalid'
  | 'toc-orphan'
  | 'layer-state-invalid'
  | 'pin-invalid';

export interface CheckProblem {
  kind: CheckProblemKind;
  path: string;
  /** One line: what is wrong (never a secret: paths and digests only). */
  detail: string;
  /** True once --repair removed it. */
  repaired: boolean;
}

export interface CheckReport {
  problems: CheckProblem[];
  counts: Record<string, number>;
}

export interface CheckOptions {
  repair: boolean;
  /** Run by a live store: temp files may belong to writes in flight, so they are not reported. */
  running?: boolean;
  /** Chunk files hashed at once (default 4). */
  concurrency?: number;
  /** Called after each chunk file is hashed (the long part of a check): a progress bar. */
  onChunk?: (done: number, total: number) => void;
}

const HEX64 = /^[0-9a-f]{64}$/;
const HEX2 = /^[0-9a-f]{2}$/;

/** sha256 (hex) of a file, streamed: a chunk is never held whole in memory here. */
export function hashFile(path: string): Promise<{ hex: string; size: number }> {
  return new Promise((resolve, reject) => {
    const h = createHash('sha256');
    let size = 0;
    createReadStream(path)
      .on('data', (c: string | Buffer) => {
        const b = typeof c === 'string' ? Buffer.from(c) : c;
        size += b.length;
        h.update(b);
      })
      .on('error', reject)
      .on('end', () => resolve({ hex: h.digest('hex'), size }));
  });
}

/** Records a problem and, when repairing, removes the file (a vanished file counts as removed). */
export async function addProblem(
  report: CheckReport,
  opts: CheckOptions,
  p: Omit<CheckProblem, 'repaired'>,
): Promise<void> {
  let repaired = false;
  if (opts.repair) {
    // force: a file that vanished meanwhile is as good as removed
    repaired = await rm(p.path, { recursive: true, force: true }).then(
      () => true,
      () => false,
    );
  }
  report.problems.push({ ...p, repaired });
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).sort();
  } catch {
    return [];
  }
}

/** Checks `<root>/cache`; adds to `report`. */
export async function checkChunkCache(root: string, report: CheckReport, opts: CheckOptions): Promise<void> {
  const paths = new CachePaths(root);
  let chunks = 0;
  let bytes = 0;
  const queue: Array<{ hex: string; file: string }> = [];

  for (const name of opts.running === true ? [] : await listDir(paths.tmp)) {
    await addProblem(report, opts, {
      kind: 'temp-file',
      path: join(paths.tmp, name),
      detail: 'temp file left by an interrupted chunk write',
    });
  }
  for (const prefix of await listDir(paths.chunks)) {
    const dir = join(paths.chunks, prefix);
    if (!HEX2.test(prefix)) {
      await addProblem(report, opts, {
        kind: 'stray-file',
        path: dir,
        detail: 'not a chunk prefix directory',
      });
      continue;
    }
    let handle;
    try {
      handle = await opendir(dir);
    } catch {
      continue;
    }
    const names: Array<{ name: string; isFile: boolean }> = [];
    for await (const ent of handle) names.push({ name: ent.name, isFile: ent.isFile() });
    names.sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const { name, isFile } of names) {
      const file = join(dir, name);
      if (!isFile || !HEX64.test(name) || !name.startsWith(prefix)) {
        await addProblem(report, opts, {
          kind: 'stray-file',
          path: file,
          detail: 'not a chunk file (name must be the sha256 hex of its content, under its 2-hex prefix)',
        });
        continue;
      }
      queue.push({ hex: name, file });
    }
    // an emptied prefix directory is recreated on demand
    if (opts.repair) await rmdir(dir).catch(() => undefined);
  }

  const bad: Array<Omit<CheckProblem, 'repaired'>> = [];
  let next = 0;
  let hashed = 0;
  const worker = async (): Promise<void> => {
    while (next < queue.length) {
      const { hex, file } = queue[next++]!;
      try {
        const got = await hashFile(file);
        chunks++;
        bytes += got.size;
        if (got.hex !== hex) {
          bad.push({
            kind: 'chunk-corrupt',
            path: file,
            detail: `chunk sha256:${hex} hashes to sha256:${got.hex} (${got.size} bytes)`,
          });
        }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        bad.push({
          kind: 'chunk-unreadable',
          path: file,
          detail: `chunk sha256:${hex} cannot be read: ${(err as Error).message}`,
        });
      } finally {
        opts.onChunk?.(++hashed, queue.length);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, opts.concurrency ?? 4) }, worker));
  bad.sort((a, b) => (a.path < b.path ? -1 : 1));
  for (const p of bad) await addProblem(report, opts, p);
  report.counts.chunks = chunks;
  report.counts.chunkBytes = bytes;
}
