import { StoreError, type ErrorContext } from './errors.js';

/** The error for an aborted signal: its reason when it is a StoreError, else E_ABORTED. */
export function abortError(signal: AbortSignal, ctx: ErrorContext = {}): StoreError {
  const r: unknown = signal.reason;
  if (r instanceof StoreError) return r;
  return new StoreError('E_ABORTED', r instanceof Error ? r.message : 'aborted', ctx, { cause: r });
}

/**
 * `p`, or a rejection as soon as `signal` aborts (with the signal's reason, so a Preempted reason
 * stays recognisable). `p` itself is not cancelled and never reported unhandled.
 */
export function raceAbort<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  p.catch(() => undefined);
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e as Error);
      },
    );
  });
}
