import type { LayerStatus } from './layer-store.js';

/**
 * Layer count per state for `stargz_store_layers`: `verified` (whole layer fetched and its DiffID
 * checked), `fetching`, `error` (a lazy layer whose last fetch failed), `resolving`, `not_lazy`.
 */
export function layerStateCounts(rows: readonly LayerStatus[]): Record<string, number> {
  const out: Record<string, number> = { resolving: 0, fetching: 0, verified: 0, error: 0, not_lazy: 0 };
  for (const r of rows) {
    const state = r.lazy
      ? r.verified
        ? 'verified'
        : r.lastError !== undefined
          ? 'error'
          : 'fetching'
      : r.reason === 'resolving'
        ? 'resolving'
        : 'not_lazy';
    out[state] = (out[state] ?? 0) + 1;
  }
  return out;
}
