import { StoreError, type ErrorContext } from '../util/errors.js';

/** Reason used when the per-attempt timer fires: the attempt may be retried. */
export class AttemptTimeout extends StoreError {
  constructor(ms: number, context: ErrorContext = {}) {
    super('E_DEADLINE', `request attempt timed out after ${ms} ms`, { ...context, timeoutMs: ms });
    this.name = 'AttemptTimeout';
  }
}

export interface Linked {
  signal: AbortSignal;
  dispose(): void;
}

/**
 * One signal that aborts when any parent aborts or after `timeoutMs`, with a typed reason.
 * `dispose()` clears the timer and listeners (AbortSignal.any keeps parents' listeners alive
 * for as long as the child lives, which adds up over millions of block reads).
 */
export function linkSignals(
  parents: Array<AbortSignal | undefined>,
  timeoutMs?: number,
  timeoutReason?: () => unknown,
): Linked {
  const ctl = new AbortController();
  const cleanups: Array<() => void> = [];
  const dispose = () => {
    for (const c of cleanups.splice(0)) c();
  };
  for (const p of parents) {
    if (!p) continue;
    if (p.aborted) {
      ctl.abort(p.reason);
      return { signal: ctl.signal, dispose };
    }
    const onAbort = () => {
      ctl.abort(p.reason);
      dispose();
    };
    p.addEventListener('abort', onAbort, { once: true });
    cleanups.push(() => p.removeEventListener('abort', onAbort));
  }
  if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
    const t = setTimeout(
      () => {
        ctl.abort(
          timeoutReason
            ? timeoutReason()
            : new StoreError('E_DEADLINE', `deadline of ${timeoutMs} ms exceeded`),
        );
        dispose();
      },
      Math.max(0, timeoutMs),
    );
    t.unref?.();
    cleanups.push(() => clearTimeout(t));
  }
  return { signal: ctl.signal, dispose };
}

/** A caller's signal, re-labelled so its aborts surface as E_ABORTED. */
export function abortedError(signal: AbortSignal, context: ErrorContext = {}): StoreError {
  const r: unknown = signal.reason;
  if (r instanceof StoreError) return r;
  if (r instanceof Error && r.name === 'TimeoutError') {
    return new StoreError('E_DEADLINE', 'deadline exceeded', context, { cause: r });
  }
  return new StoreError('E_ABORTED', 'operation aborted', context, { cause: r });
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortedError(signal));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(abortedError(signal!));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Await `p`, but give up with the signal's reason as soon as `signal` aborts (`p` keeps running). */
export function raceSignal<T>(
  p: Promise<T>,
  signal: AbortSignal | undefined,
  context: ErrorContext = {},
): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(abortedError(signal, context));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortedError(signal, context));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
