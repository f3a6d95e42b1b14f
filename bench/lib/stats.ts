/** Small statistics helpers for benchmark samples (pure). */

export interface Summary {
  n: number;
  p50: number;
  p95: number;
  min: number;
  max: number;
  mean: number;
}

/**
 * Percentile with linear interpolation between closest ranks (the "type 7" definition used by
 * numpy and R by default). `p` in [0, 100]. Empty input gives NaN.
 */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  if (p < 0 || p > 100 || Number.isNaN(p)) throw new RangeError(`percentile out of range: ${p}`);
  const sorted = [...values].sort((a, b) => a - b);
  const h = (sorted.length - 1) * (p / 100);
  const lo = Math.floor(h);
  const hi = Math.ceil(h);
  const a = sorted[lo]!;
  const b = sorted[hi]!;
  return a + (b - a) * (h - lo);
}

export function summarize(values: readonly number[]): Summary {
  const finite = values.filter((v) => Number.isFinite(v));
  if (finite.length === 0) return { n: 0, p50: NaN, p95: NaN, min: NaN, max: NaN, mean: NaN };
  return {
    n: finite.length,
    p50: percentile(finite, 50),
    p95: percentile(finite, 95),
    min: Math.min(...finite),
    max: Math.max(...finite),
    mean: finite.reduce((s, v) => s + v, 0) / finite.length,
  };
}

/** a / b, or undefined when either side is missing or b is not positive. */
export function ratio(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b <= 0)
    return undefined;
  return a / b;
}
