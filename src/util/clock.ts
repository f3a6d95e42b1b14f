import { StoreError } from './errors.js';

/**
 * Time as the engine sees it: injectable, so schedulers (quiet periods, bandwidth buckets) can be
 * tested without sleeping and without depending on the machine's speed.
 */
export interface Clock {
  /** Milliseconds, monotonic. */
  now(): number;
  /** Resolves after `ms` (rejects with the signal's reason when it aborts first). */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new StoreError('E_ABORTED', 'aborted');
}

export const systemClock: Clock = {
  now: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortReason(signal));
        return;
      }
      const onAbort = (): void => {
        clearTimeout(t);
        reject(abortReason(signal!));
      };
      const t = setTimeout(
        () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        Math.max(0, ms),
      );
      // a pending background wait must never keep the process alive
      t.unref();
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
};

/**
 * A clock that only moves when told to (tests): `advance(ms)` wakes every sleeper whose time has
 * come, in time order.
 */
export class ManualClock implements Clock {
  private t = 0;
  private sleepers: Array<{ at: number; resolve: () => void }> = [];

  now(): number {
    return this.t;
  }

  /** Sleepers currently waiting (tests wait for this to know a task reached its wait). */
  get waiting(): number {
    return this.sleepers.length;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortReason(signal));
        return;
      }
      const entry = {
        at: this.t + Math.max(0, ms),
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = (): void => {
        this.sleepers = this.sleepers.filter((s) => s !== entry);
        reject(abortReason(signal!));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (entry.at <= this.t) entry.resolve();
      else this.sleepers.push(entry);
    });
  }

  advance(ms: number): void {
    this.t += ms;
    const due = this.sleepers.filter((s) => s.at <= this.t).sort((a, b) => a.at - b.at);
    this.sleepers = this.sleepers.filter((s) => s.at > this.t);
    for (const s of due) s.resolve();
  }
}
