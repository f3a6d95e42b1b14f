/** Retry settings (the Go store's `[blob] max_retries / min_wait_msec / max_wait_msec`). */
export interface RetryOptions {
  /** Extra attempts after the first (default 5, i.e. 6 attempts). */
  maxRetries?: number;
  /** Base wait, doubled per attempt (default 30 ms). */
  minWaitMs?: number;
  /** Cap of one wait (default 300 000 ms). */
  maxWaitMs?: number;
}

export interface RetryPolicy {
  maxRetries: number;
  minWaitMs: number;
  maxWaitMs: number;
}

export function retryPolicy(o: RetryOptions = {}): RetryPolicy {
  const pos = (v: number | undefined, d: number) =>
    v === undefined || !Number.isFinite(v) || v <= 0 ? d : v;
  return {
    maxRetries: o.maxRetries === undefined || o.maxRetries < 0 ? 5 : Math.floor(o.maxRetries),
    minWaitMs: pos(o.minWaitMs, 30),
    maxWaitMs: pos(o.maxWaitMs, 300_000),
  };
}

/**
 * Wait before retry number `attempt` (0-based): exponential `minWait * 2^attempt` capped at
 * `maxWait`, plus uniform jitter in [0, wait) so that many readers hit by the same outage do not
 * come back in lockstep. A server's Retry-After replaces the exponential part, uncapped like Go's
 * retryablehttp (the caller's deadline bounds it), with a little jitter only.
 */
export function backoffMs(
  p: RetryPolicy,
  attempt: number,
  retryAfterMs?: number,
  random = Math.random,
): number {
  if (retryAfterMs !== undefined) {
    return retryAfterMs + random() * Math.min(retryAfterMs * 0.1, 1000);
  }
  const base = Math.min(p.minWaitMs * 2 ** Math.min(attempt, 40), p.maxWaitMs);
  return base + random() * base;
}

/** `Retry-After: <seconds>` or `<HTTP-date>`; undefined when absent or unparsable. */
export function parseRetryAfter(v: string | string[] | undefined, now = Date.now()): number | undefined {
  const s = Array.isArray(v) ? v[0] : v;
  if (s === undefined) return undefined;
  const t = s.trim();
  if (/^\d+$/.test(t)) return Number(t) * 1000;
  const d = Date.parse(t);
  if (Number.isNaN(d)) return undefined;
  return Math.max(0, d - now);
}

/** 429 and 5xx except 501 (Not Implemented will not change on retry). */
export function isRetryableStatus(status: number): boolean {
  return status === 429 || (status >= 500 && status !== 501) || status === 0;
}

const CERT_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'HOSTNAME_MISMATCH',
  'EPROTO',
]);
const FATAL_CODES = new Set(['UND_ERR_INVALID_ARG', 'UND_ERR_NOT_SUPPORTED', 'ERR_INVALID_URL', 'ENOTFOUND']);

function errCode(err: unknown): string | undefined {
  let e: unknown = err;
  for (let i = 0; i < 4 && e; i++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Certificate and TLS protocol failures are configuration problems: retrying cannot help. */
export function isTlsFailure(err: unknown): boolean {
  const code = errCode(err) ?? '';
  return (
    code.startsWith('ERR_SSL_') ||
    code.startsWith('ERR_TLS_') ||
    code.startsWith('CERT_') ||
    CERT_CODES.has(code)
  );
}

/** Transport errors worth another attempt (resets, refused, premature close, socket timeouts). */
export function isRetryableNetworkError(err: unknown): boolean {
  const code = errCode(err);
  if (code === undefined) return true;
  if (FATAL_CODES.has(code) || isTlsFailure(err)) return false;
  return true;
}

export function networkErrorCode(err: unknown): string {
  return errCode(err) ?? (err instanceof Error ? err.name : 'unknown');
}
