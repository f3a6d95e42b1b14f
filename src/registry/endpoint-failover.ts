import { StoreError, isStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { HostHealth } from './host-health.js';
import type { Endpoint } from './hosts.js';
import type { ImageRef } from './reference.js';

export interface FailoverRequest {
  ref: ImageRef;
  /** What is fetched, for the log line: 'manifest', 'config', 'blob'. */
  what: string;
  signal: AbortSignal;
  /** A blob: a 404 from a mirror skips that mirror for this blob only. */
  digest?: string;
}

/**
 * Try each endpoint in order (mirrors first, the registry last), mirrors cooling down after a
 * failure moved last: the same health record blob reads keep, so a dead mirror costs one timeout,
 * not one per request. The registry's own error wins over mirrors' when all fail; aborts,
 * deadlines, digest mismatches and bad manifests end the walk at once.
 */
export async function eachEndpoint<T>(
  eps: readonly Endpoint[],
  health: HostHealth,
  logger: Logger,
  req: FailoverRequest,
  fn: (ep: Endpoint) => Promise<T>,
): Promise<T> {
  const registry = eps[eps.length - 1];
  const ordered = health.order(eps, req.digest);
  let lastErr: unknown;
  let registryErr: unknown;
  for (const ep of ordered) {
    try {
      const v = await fn(ep);
      health.succeeded(ep.origin);
      return v;
    } catch (err) {
      if (req.signal.aborted || isStoreError(err, 'E_ABORTED') || isStoreError(err, 'E_DEADLINE')) throw err;
      if (isStoreError(err, 'E_DIGEST_MISMATCH') || isStoreError(err, 'E_MANIFEST')) throw err;
      lastErr = err;
      if (ep === registry) registryErr = err;
      else if (hostDown(err)) health.hostFailed(ep.origin);
      else if (req.digest !== undefined && isStoreError(err, 'E_REGISTRY_NOT_FOUND'))
        health.blobMissing(ep.origin, req.digest);
      if (ep !== ordered[ordered.length - 1]) {
        logger.warn(
          { host: ep.host, what: req.what, code: isStoreError(err) ? err.code : 'E_IO' },
          'registry endpoint failed; trying the next',
        );
      }
    }
  }
  throw (
    registryErr ?? lastErr ?? new StoreError('E_CONFIG', 'no registry endpoint', { ref: req.ref.toString() })
  );
}

/** The host itself failed (unreachable, 5xx, garbled answers), not just this request's object. */
function hostDown(err: unknown): boolean {
  return (
    !isStoreError(err) ||
    isStoreError(err, 'E_REGISTRY_NETWORK') ||
    isStoreError(err, 'E_REGISTRY_STATUS') ||
    isStoreError(err, 'E_REGISTRY_PROTOCOL') ||
    isStoreError(err, 'E_IO')
  );
}
