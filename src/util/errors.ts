import { metricHooks } from './metric-hooks.js';

/**
 * One error family for the whole store. Codes are stable strings that tests, logs and the
 * errno/exit-code edges switch on; `context` carries ref, digest, path, offset ... but never secrets.
 */
export type ErrorCode =
  // format
  | 'E_BAD_FOOTER'
  | 'E_BAD_TOC'
  | 'E_TOC_TOO_LARGE'
  | 'E_TOO_MANY_ENTRIES'
  | 'E_TOC_DIGEST_MISMATCH'
  | 'E_DIGEST_MISMATCH'
  | 'E_DECOMPRESS'
  | 'E_TRUNCATED'
  | 'E_UNSUPPORTED_FORMAT'
  | 'E_BAD_ARCHIVE'
  | 'E_HOSTILE_PATH'
  // lookup / generic
  | 'E_NOT_FOUND'
  | 'E_INVALID_ARGUMENT'
  | 'E_DEADLINE'
  | 'E_ABORTED'
  | 'E_LAYER_BAD'
  | 'E_CONFIG'
  | 'E_IO'
  // registry
  | 'E_BAD_REFERENCE'
  | 'E_REGISTRY_UNAUTHORIZED'
  | 'E_REGISTRY_DENIED'
  | 'E_REGISTRY_NOT_FOUND'
  | 'E_REGISTRY_STATUS'
  | 'E_REGISTRY_PROTOCOL'
  | 'E_REGISTRY_NETWORK'
  | 'E_MANIFEST'
  | 'E_PLATFORM_NOT_FOUND'
  | 'E_TOO_LARGE';

export type ErrorContext = Record<string, string | number | boolean | undefined>;

export class StoreError extends Error {
  readonly code: ErrorCode;
  readonly context: ErrorContext;

  constructor(code: ErrorCode, message: string, context: ErrorContext = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreError';
    this.code = code;
    this.context = context;
  }

  /** Structured form for pino (`err` field). */
  toJSON(): Record<string, unknown> {
    return { code: this.code, message: this.message, ...this.context };
  }
}

/** Raised when a chunk's (or the TOC's) sha256 differs from the digest the TOC promises. */
export class DigestMismatchError extends StoreError {
  constructor(
    what: 'chunk' | 'toc' | 'diffid' | 'blob',
    expected: string,
    actual: string,
    context: ErrorContext = {},
  ) {
    const where = context.path !== undefined ? ` of ${String(context.path)}` : '';
    const at = context.offset !== undefined ? ` at offset ${String(context.offset)}` : '';
    super(
      what === 'toc' ? 'E_TOC_DIGEST_MISMATCH' : 'E_DIGEST_MISMATCH',
      `${what} digest mismatch${where}${at}: expected ${expected}, got ${actual}`,
      { ...context, what, expected, actual },
    );
    this.name = 'DigestMismatchError';
    metricHooks.verificationFailure(what);
  }
}

export function isStoreError(err: unknown, code?: ErrorCode): err is StoreError {
  return err instanceof StoreError && (code === undefined || err.code === code);
}

/** Wrap anything thrown into a StoreError without losing the original as `cause`. */
export function asStoreError(
  err: unknown,
  fallback: ErrorCode = 'E_IO',
  context: ErrorContext = {},
): StoreError {
  if (err instanceof StoreError) return err;
  if (err instanceof Error && err.name === 'AbortError') {
    return new StoreError('E_ABORTED', err.message, context, { cause: err });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new StoreError(fallback, message, context, { cause: err });
}
