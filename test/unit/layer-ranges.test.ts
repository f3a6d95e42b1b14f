import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Chunk } from '../../src/format/model.js';
import { coalesce, planUnits, type Span } from '../../src/layer/index.js';

describe('coalesce', () => {
  it('merges touching, overlapping and near spans; keeps far ones apart', () => {
    const spans: Span[] = [
      { offset: 100, end: 200 },
      { offset: 0, end: 50 },
      { offset: 50, end: 60 },
      { offset: 150, end: 180 },
      { offset: 205, end: 300 },
      { offset: 1000, end: 1100 },
    ];
    const r = coalesce(spans, 10);
    expect(r.map(({ offset, length }) => ({ offset, length }))).toEqual([
      { offset: 0, length: 60 },
      { offset: 100, length: 200 },
      { offset: 1000, length: 100 },
    ]);
    expect(r[1]!.spans).toHaveLength(3);
  });

  it('property: ranges are sorted, separated by more than maxGap, and contain each span exactly once', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc
            .tuple(fc.nat(100_000), fc.integer({ min: 1, max: 5000 }))
            .map(([o, l]) => ({ offset: o, end: o + l })),
          { maxLength: 60 },
        ),
        fc.nat(2000),
        (spans, gap) => {
          const ranges = coalesce(spans, gap);
          let count = 0;
          for (let i = 0; i < ranges.length; i++) {
            const r = ranges[i]!;
            if (i > 0) {
              const p = ranges[i - 1]!;
              expect(r.offset).toBeGreaterThan(p.offset + p.length + gap);
            }
            for (const s of r.spans) {
              expect(s.offset).toBeGreaterThanOrEqual(r.offset);
              expect(s.end).toBeLessThanOrEqual(r.offset + r.length);
            }
            count += r.spans.length;
            // no byte outside the union of spans + allowed gaps
            expect(Math.min(...r.spans.map((s) => s.offset))).toBe(r.offset);
            expect(Math.max(...r.spans.map((s) => s.end))).toBe(r.offset + r.length);
          }
          expect(count).toBe(spans.length);
        },
      ),
    );
  });
});

function chunk(co: number, ce: number, i: number): Chunk {
  return {
    fileOffset: 0,
    size: 1,
    compressedOffset: co,
    compressedEnd: ce,
    innerOffset: 0,
    digest: `sha256:${i.toString(16).padStart(64, '0')}`,
  };
}

describe('planUnits', () => {
  it('property: units tile [0, blobSize) and every chunk lies in exactly one unit (any unit size)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 3000 }), { minLength: 0, maxLength: 80 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 80 }),
        // nonsense unit sizes (from a bad config) must still terminate and tile
        fc.oneof(fc.integer({ min: 1, max: 20_000 }), fc.constantFrom(0, -5, Number.NaN)),
        fc.integer({ min: 0, max: 5000 }),
        (sizes, shares, unitBytes, tail) => {
          // consecutive members; some members shared by several chunks (same span)
          const chunks: Chunk[] = [];
          let pos = 100;
          sizes.forEach((sz, i) => {
            const copies = 1 + (shares[i] ?? 0);
            for (let k = 0; k < copies; k++) chunks.push(chunk(pos, pos + sz, chunks.length));
            pos += sz;
          });
          const blobSize = pos + tail;
          const units = planUnits({ chunks, totalChunkBytes: chunks.length }, blobSize, unitBytes);
          let at = 0;
          for (const u of units) {
            expect(u.offset).toBe(at);
            expect(u.end).toBeGreaterThan(u.offset);
            at = u.end;
          }
          expect(at).toBe(blobSize);
          const seen = units.flatMap((u) => {
            for (const c of u.chunks) {
              expect(c.compressedOffset).toBeGreaterThanOrEqual(u.offset);
              expect(c.compressedEnd).toBeLessThanOrEqual(u.end);
            }
            return u.chunks;
          });
          expect(seen).toHaveLength(chunks.length);
        },
      ),
    );
  });
});
