import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IntervalSet, type Interval } from '../../src/cache/interval-set.js';

const N = 200;

/** Naive model: one boolean per byte offset in [0, N). */
function runsOf(bits: boolean[], start: number, end: number, want: boolean): Interval[] {
  const out: Interval[] = [];
  for (let i = start; i < end; i++) {
    if (bits[i] !== want) continue;
    const last = out[out.length - 1];
    if (last !== undefined && last.end === i) last.end = i + 1;
    else out.push({ start: i, end: i + 1 });
  }
  return out;
}

const range = fc
  .tuple(fc.integer({ min: 0, max: N }), fc.integer({ min: 0, max: N }))
  .map(([a, b]) => ({ start: Math.min(a, b), end: Math.max(a, b) }));
const op = fc.record({ del: fc.boolean(), r: range });

describe('IntervalSet against a naive bitmap', () => {
  it('add/delete keep the canonical form; covers, missing, overlap and size agree with the bitmap', () => {
    fc.assert(
      fc.property(
        fc.array(op, { maxLength: 40 }),
        fc.array(range, { minLength: 1, maxLength: 10 }),
        (ops, queries) => {
          const set = new IntervalSet();
          const bits = new Array<boolean>(N).fill(false);
          for (const { del, r } of ops) {
            if (del) set.delete(r.start, r.end);
            else set.add(r.start, r.end);
            for (let i = r.start; i < r.end; i++) bits[i] = !del;
          }
          // canonical: sorted, disjoint, non-adjacent, non-empty; equals the bitmap's runs
          expect(set.intervals()).toEqual(runsOf(bits, 0, N, true));
          expect(set.size).toBe(bits.filter(Boolean).length);
          for (const q of queries) {
            const expectedMissing = runsOf(bits, q.start, q.end, false);
            expect(set.missing(q.start, q.end)).toEqual(expectedMissing);
            expect(set.overlap(q.start, q.end)).toEqual(runsOf(bits, q.start, q.end, true));
            expect(set.covers(q.start, q.end)).toBe(expectedMissing.length === 0);
            expect(set.coveredBytes(q.start, q.end)).toBe(bits.slice(q.start, q.end).filter(Boolean).length);
          }
          // from() of its own intervals is the same set
          expect(IntervalSet.from(set.intervals()).intervals()).toEqual(set.intervals());
        },
      ),
      { numRuns: 500 },
    );
  });

  it('touching intervals merge, empty and inverted ranges are no-ops', () => {
    const s = new IntervalSet();
    s.add(0, 10);
    s.add(10, 20);
    s.add(30, 30);
    s.add(40, 35);
    expect(s.intervals()).toEqual([{ start: 0, end: 20 }]);
    expect(s.covers(5, 5)).toBe(true);
    expect(s.covers(19, 21)).toBe(false);
    expect(s.missing(15, 25)).toEqual([{ start: 20, end: 25 }]);
    s.delete(5, 6);
    expect(s.intervals()).toEqual([
      { start: 0, end: 5 },
      { start: 6, end: 20 },
    ]);
    expect(s.count).toBe(2);
  });
});
