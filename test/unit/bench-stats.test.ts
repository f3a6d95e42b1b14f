import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { percentile, ratio, summarize } from '../../bench/lib/stats.js';

describe('bench stats', () => {
  it('interpolates between closest ranks (type 7)', () => {
    // by definition: median of 1..4 is halfway between 2 and 3
    expect(percentile([4, 1, 3, 2], 50)).toBe(2.5);
    // 1..20: h = 19 * 0.95 = 18.05 -> x[18] + 0.05 * (x[19] - x[18]) = 19 + 0.05
    const xs = Array.from({ length: 20 }, (_, i) => i + 1);
    expect(percentile(xs, 95)).toBeCloseTo(19.05, 12);
    expect(percentile([7], 95)).toBe(7);
    expect(Number.isNaN(percentile([], 50))).toBe(true);
    expect(() => percentile([1], 101)).toThrow(RangeError);
  });

  it('is bounded by min/max, monotonic in p, and does not mutate its input', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: -1e6, max: 1e6, noNaN: true }), { minLength: 1, maxLength: 50 }),
        fc.double({ min: 0, max: 100, noNaN: true }),
        fc.double({ min: 0, max: 100, noNaN: true }),
        (xs, p, q) => {
          const copy = [...xs];
          const a = percentile(xs, Math.min(p, q));
          const b = percentile(xs, Math.max(p, q));
          expect(xs).toEqual(copy);
          expect(a).toBeGreaterThanOrEqual(Math.min(...xs));
          expect(b).toBeLessThanOrEqual(Math.max(...xs));
          expect(a).toBeLessThanOrEqual(b + 1e-9);
          expect(percentile(xs, 0) === Math.min(...xs)).toBe(true); // === : -0 and 0 tie
          expect(percentile(xs, 100) === Math.max(...xs)).toBe(true);
        },
      ),
    );
  });

  it('summarizes finite samples only', () => {
    const s = summarize([3, NaN, 1, 2, Infinity]);
    expect(s).toMatchObject({ n: 3, p50: 2, min: 1, max: 3, mean: 2 });
    expect(summarize([]).n).toBe(0);
  });

  it('ratio needs both sides and a positive denominator', () => {
    expect(ratio(1, 4)).toBe(0.25);
    expect(ratio(1, 0)).toBeUndefined();
    expect(ratio(undefined, 2)).toBeUndefined();
    expect(ratio(1, NaN)).toBeUndefined();
  });
});
