import { fileURLToPath } from 'node:url';
import { renderMetrics } from '../../src/util/metrics.js';
import { runChild } from './fuse.js';

/** Helpers of the concurrency suite (test/integration/concurrency-*.test.ts). */

const READER = fileURLToPath(new URL('./random-reader.mjs', import.meta.url));

export interface ReaderFile {
  /** The file under the mount. */
  path: string;
  /** A local copy of what it must contain. */
  expected: string;
  size: number;
}

export interface ReaderJob {
  files: ReaderFile[];
  reads: number;
  /** Longest read (bytes); lengths are uniform in 1..maxLength. */
  maxLength: number;
  seed: number;
  /** Reads in flight in one reader. */
  inFlight: number;
  /** O_DIRECT: every read goes to the store instead of the kernel page cache. */
  direct: boolean;
}

export interface ReaderResult {
  reads: number;
  bytes: number;
  mismatches: number;
  errors: number;
  firstProblem: string | null;
}

/** One reader process (test/helpers/random-reader.mjs): random preads compared with the local copy. */
export async function runReader(job: ReaderJob, timeoutMs = 180_000): Promise<ReaderResult> {
  const r = await runChild(process.execPath, [READER], JSON.stringify(job), timeoutMs);
  if (r.code !== 0) throw new Error(`reader (seed ${job.seed}) exited ${r.code}: ${r.stderr.slice(-2000)}`);
  return JSON.parse(r.stdout) as ReaderResult;
}

/** Sum of results (reads, bytes, mismatches, errors) and the first problem any reader saw. */
export function sumReaders(results: readonly ReaderResult[]): ReaderResult {
  return results.reduce<ReaderResult>(
    (a, r) => ({
      reads: a.reads + r.reads,
      bytes: a.bytes + r.bytes,
      mismatches: a.mismatches + r.mismatches,
      errors: a.errors + r.errors,
      firstProblem: a.firstProblem ?? r.firstProblem,
    }),
    { reads: 0, bytes: 0, mismatches: 0, errors: 0, firstProblem: null },
  );
}

/** Sum of the values of every series of `name` (exact metric name, any labels) in the metrics text. */
export async function metricSum(name: string, labelFilter = ''): Promise<number> {
  const { body } = await renderMetrics();
  let n = 0;
  for (const line of body.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
    if (!line.includes(labelFilter)) continue;
    n += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return n;
}

/**
 * FUSE operations answered with E_DEADLINE so far in this process (every operation label summed).
 * Needs enableMetrics() before the store serves.
 */
export async function deadlineExpiries(): Promise<number> {
  return await metricSum('stargz_store_fuse_deadline_expiries_total');
}

/** FUSE read operations the store answered so far in this process (needs enableMetrics()). */
export async function fuseReads(): Promise<number> {
  return await metricSum('stargz_store_fuse_operation_duration_seconds_count', 'operation="read"');
}
