/**
 * Test hook for the crash suite (issue 14): `STARGZ_STORE_CRASH_AT="<point>[:<nth>[:<detail>]]"`
 * makes the store SIGKILL itself the nth time (default 1) it reaches the named point, so a test
 * can crash it exactly between, say, a temp file's write and its rename instead of by luck.
 * `<detail>`: only hits whose detail (e.g. the file path) contains this text count.
 *
 * Read once at start-up; unset (production), `crashPoint` is one comparison with undefined.
 * Points: `fuse-read` (bytes fetched, FUSE read not answered yet), `chunk-write` (chunk temp file
 * written, not renamed), `background-unit` (a background unit fetched, part of its chunks cached),
 * `metadata-write` (an atomic metadata file's temp written, not renamed; detail: its path).
 */
import { AsyncLocalStorage } from 'node:async_hooks';

export interface CrashSpec {
  point: string;
  nth: number;
  detail?: string;
}

export function parseCrashSpec(raw: string | undefined): CrashSpec | undefined {
  if (raw === undefined || raw === '') return undefined;
  const [point, nth, ...rest] = raw.split(':');
  const n = nth === undefined || nth === '' ? 1 : Number(nth);
  if (!point || !Number.isSafeInteger(n) || n < 1) {
    throw new Error(`STARGZ_STORE_CRASH_AT: want <point>[:<nth>[:<detail>]], got ${raw.slice(0, 100)}`);
  }
  const detail = rest.join(':');
  return detail === '' ? { point, nth: n } : { point, nth: n, detail };
}

const spec = parseCrashSpec(process.env.STARGZ_STORE_CRASH_AT);
let hits = 0;
/** Set in the async context of work that is not the store's own state (the start-up rehearsal). */
const unarmed = new AsyncLocalStorage<true>();

/**
 * Run `fn` with crash points unarmed in its async context: the start-up rehearsal's throwaway
 * store (store/rehearsal.ts) writes chunks and records too, and a crash there is not one between
 * the store's own write and rename.
 */
export function withoutCrashPoints<T>(fn: () => Promise<T>): Promise<T> {
  return spec === undefined ? fn() : unarmed.run(true, fn);
}

/** Kill this process (SIGKILL: no handler, no cleanup) if the crash spec names this hit. */
export function crashPoint(point: string, detail?: string): void {
  if (spec === undefined || spec.point !== point) return;
  if (spec.detail !== undefined && !(detail ?? '').includes(spec.detail)) return;
  if (unarmed.getStore() === true) return;
  if (++hits >= spec.nth) process.kill(process.pid, 'SIGKILL');
}
