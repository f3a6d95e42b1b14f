import { linkSignals, raceSignal } from './abort.js';

/**
 * One single-flight for the whole store: concurrent callers asking for the same key share one
 * running call; the entry is dropped when it settles (success or failure), so a failure is never
 * cached and the next caller starts afresh.
 */
export class SingleFlight<K, V> {
  private readonly running = new Map<K, Promise<V>>();

  /** The running call for `key`, or a new one started with `fn`. */
  run(key: K, fn: () => Promise<V>): Promise<V> {
    const existing = this.running.get(key);
    if (existing !== undefined) return existing;
    let started: Promise<V>;
    try {
      started = fn();
    } catch (err) {
      started = Promise.reject(err as Error);
    }
    // settles after `p` is in the table, even when `fn` failed synchronously
    const p: Promise<V> = started.finally(() => {
      if (this.running.get(key) === p) this.running.delete(key);
    });
    this.running.set(key, p);
    return p;
  }

  /**
   * `run` for callers with signals of their own. The shared call runs under its own deadline
   * (`deadlineMs`, failing with `deadlineError()`), never under the first caller's signal, so one
   * caller giving up does not fail the others; each caller still stops waiting (E_ABORTED) as soon
   * as its own signal aborts.
   */
  share(
    key: K,
    signal: AbortSignal | undefined,
    deadlineMs: number,
    deadlineError: () => Error,
    fn: (own: AbortSignal) => Promise<V>,
  ): Promise<V> {
    const p = this.run(key, async () => {
      const own = linkSignals([], deadlineMs, deadlineError);
      try {
        return await fn(own.signal);
      } finally {
        own.dispose();
      }
    });
    // every caller may stop waiting: the shared call's failure must not surface as unhandled
    p.catch(() => undefined);
    return raceSignal(p, signal);
  }

  /** The running call for `key`, if any (to join without starting one). */
  get(key: K): Promise<V> | undefined {
    return this.running.get(key);
  }

  /**
   * Drop `key`'s entry now if it is still `call` (its callers gave up on it): later callers start
   * afresh instead of joining a call that may be stuck. `call` itself still settles as it will.
   */
  forget(key: K, call: Promise<V>): void {
    if (this.running.get(key) === call) this.running.delete(key);
  }

  has(key: K): boolean {
    return this.running.has(key);
  }

  /** Every running call (to wait for all of them, e.g. before closing). */
  values(): IterableIterator<Promise<V>> {
    return this.running.values();
  }

  get size(): number {
    return this.running.size;
  }
}
