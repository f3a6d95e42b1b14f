import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { IntervalSet } from '../../src/cache/interval-set.js';
import type { ByteRange } from '../../src/util/blob-read.js';
import { coalesce } from '../../src/util/byte-range.js';

const toSet = (rs: readonly ByteRange[]) =>
  IntervalSet.from(rs.map((r) => ({ start: r.offset, end: r.offset + r.length })));

describe('coalesce (the one range merge)', () => {
  it('merges gaps up to `gap`, cuts pieces at `maxLength`, covering exactly the merged span', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ offset: fc.nat(200), length: fc.nat(60) }), { maxLength: 20 }),
        fc.integer({ min: 0, max: 30 }),
        fc.integer({ min: 1, max: 50 }),
        (ranges, gap, maxLength) => {
          const merged = coalesce(ranges, gap);
          // every input byte is in the output; gaps between outputs are > gap
          const out = toSet(merged);
          for (const r of ranges) expect(out.covers(r.offset, r.offset + r.length)).toBe(true);
          for (let i = 1; i < merged.length; i++)
            expect(merged[i]!.offset - (merged[i - 1]!.offset + merged[i - 1]!.length)).toBeGreaterThan(gap);
          const cut = coalesce(ranges, gap, maxLength);
          for (const c of cut) expect(c.length).toBeLessThanOrEqual(maxLength);
          expect(toSet(cut).intervals()).toEqual(out.intervals());
        },
      ),
      { numRuns: 300 },
    );
  });

  it('does not modify its input', () => {
    const input = [
      { offset: 10, length: 5 },
      { offset: 0, length: 12 },
    ];
    expect(coalesce(input)).toEqual([{ offset: 0, length: 15 }]);
    expect(input).toEqual([
      { offset: 10, length: 5 },
      { offset: 0, length: 12 },
    ]);
  });
});
