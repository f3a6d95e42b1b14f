import { StoreError, type ErrorContext } from '../util/errors.js';

/**
 * Settle with `work`, or reject with E_DEADLINE after `ms` / E_ABORTED when `signal` fires,
 * whichever comes first. `work` itself keeps running (a fetch still fills the cache); its late
 * rejection is swallowed here.
 */
export function withDeadline<T>(
  work: Promise<T>,
  ms: number,
  signal: AbortSignal | undefined,
  context: ErrorContext,
): Promise<T> {
  if (signal?.aborted) {
    work.catch(() => undefined);
    return Promise.reject(new StoreError('E_ABORTED', 'read aborted', context));
  }
  const timed = Number.isFinite(ms) && ms > 0;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      cleanup();
      reject(new StoreError('E_ABORTED', 'read aborted', context));
    };
    // A deadline of 0 or Infinity means none (setTimeout would treat Infinity as 1 ms).
    const timer = timed
      ? setTimeout(() => {
          cleanup();
          reject(
            new StoreError('E_DEADLINE', `read did not complete within ${ms} ms`, {
              ...context,
              deadlineMs: ms,
            }),
          );
        }, ms)
      : undefined;
    const cleanup = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        cleanup();
        resolve(v);
      },
      (err: unknown) => {
        cleanup();
        reject(err);
      },
    );
  });
}
