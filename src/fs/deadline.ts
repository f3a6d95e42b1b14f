import { StoreError, type ErrorContext } from '../util/errors.js';

/**
 * Run `fn` with an AbortSignal that fires after `ms`; the returned promise settles no later than
 * that, rejecting with StoreError('E_DEADLINE') even if `fn` ignores the signal. A parent signal
 * (e.g. shutdown) aborts too.
 */
export async function withDeadline<T>(
  ms: number,
  fn: (signal: AbortSignal) => Promise<T>,
  context: ErrorContext = {},
  parent?: AbortSignal,
): Promise<T> {
  const ac = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const onParentAbort = () => ac.abort(parent?.reason);
  parent?.addEventListener('abort', onParentAbort, { once: true });
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new StoreError('E_DEADLINE', `operation did not complete within ${ms} ms`, {
        ...context,
        ms,
      });
      ac.abort(err);
      reject(err);
    }, ms);
  });
  try {
    return await Promise.race([fn(ac.signal), expired]);
  } finally {
    clearTimeout(timer);
    parent?.removeEventListener('abort', onParentAbort);
  }
}
