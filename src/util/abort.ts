import { StoreError, type ErrorContext } from './errors.js';

/**
 * The async helpers every layer shares (signals, races, sleeps, deadlines). This is the bottom
 * layer: it imports nothing from the store but its error type.
 */

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

/** A caller's signal, re-labelled so its aborts surface as E_ABORTED (or E_DEADLINE for timeouts). */
export function abortedError(signal: AbortSignal, context: ErrorContext = {}): StoreError {
  const r: unknown = signal.reason;
  if (r instanceof StoreError) return r;
  if (r instanceof Error && r.name === 'TimeoutError') {
    return new StoreError('E_DEADLINE', 'deadline exceeded', context, { cause: r });
  }
  return new StoreError('E_ABORTED', 'operation aborted', context, { cause: r });
}

/** Wait `ms`; rejects with `abortedError(signal)` as soon as `signal` aborts. */
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

/**
 * Settle like `p`, unless `signal` fires first: then `onAbort(reject)` decides (it may reject at
 * once, later, or not at all). `p` itself is not cancelled, its late rejection is never reported
 * unhandled, and the listener is removed once `p` settles.
 */
export function raceWith<T>(
  p: Promise<T>,
  signal: AbortSignal,
  onAbort: (reject: (err: unknown) => void) => void,
): Promise<T> {
  p.catch(() => undefined);
  return new Promise<T>((resolve, reject) => {
    const fire = (): void => onAbort(reject);
    if (signal.aborted) fire();
    else signal.addEventListener('abort', fire, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', fire);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', fire);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}

/**
 * `p`, or a rejection as soon as `signal` aborts with the signal's own reason (so a Preempted
 * reason stays recognisable).
 */
export function raceAbort<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  return raceWith(p, signal, (reject) => reject(signal.reason));
}

/** Await `p`, but give up with `abortedError(signal)` as soon as `signal` aborts (`p` keeps running). */
export function raceSignal<T>(
  p: Promise<T>,
  signal: AbortSignal | undefined,
  context: ErrorContext = {},
): Promise<T> {
  if (!signal) return p;
  return raceWith(p, signal, (reject) => reject(abortedError(signal, context)));
}

export interface DeadlineOptions {
  /** A parent (caller, shutdown): its abort aborts the work's signal and rejects with E_ABORTED. */
  signal?: AbortSignal;
  context?: ErrorContext;
  /** Names the work in the error message ("read did not complete within 20000 ms"). */
  what?: string;
}

/**
 * Run `fn` with a signal that aborts after `ms`; the returned promise settles no later than that,
 * rejecting with E_DEADLINE even if `fn` ignores its signal (its work keeps running, and its late
 * rejection is swallowed). A deadline of 0 or Infinity means none (setTimeout would treat Infinity
 * as 1 ms).
 */
export function withDeadline<T>(
  ms: number,
  fn: (signal: AbortSignal) => Promise<T>,
  opts: DeadlineOptions = {},
): Promise<T> {
  const { signal: parent, context = {}, what = 'operation' } = opts;
  const ac = new AbortController();
  const cleanups: Array<() => void> = [() => clearTimeout(timer)];
  const timed = Number.isFinite(ms) && ms > 0;
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    if (!timed) return;
    timer = setTimeout(() => {
      const err = new StoreError('E_DEADLINE', `${what} did not complete within ${ms} ms`, {
        ...context,
        deadlineMs: ms,
      });
      ac.abort(err);
      reject(err);
    }, ms);
  });
  expired.catch(() => undefined);
  const aborted = new Promise<never>((_, reject) => {
    if (parent === undefined) return;
    const onAbort = (): void => {
      ac.abort(parent.reason);
      reject(new StoreError('E_ABORTED', `${what} aborted`, context));
    };
    if (parent.aborted) onAbort();
    else {
      parent.addEventListener('abort', onAbort, { once: true });
      cleanups.push(() => parent.removeEventListener('abort', onAbort));
    }
  });
  aborted.catch(() => undefined);
  let work: Promise<T>;
  try {
    work = fn(ac.signal);
  } catch (err) {
    work = Promise.reject(err as Error);
  }
  work.catch(() => undefined);
  return Promise.race([work, expired, aborted]).finally(() => {
    for (const c of cleanups.splice(0)) c();
  });
}
