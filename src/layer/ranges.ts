import type { ByteRange } from './types.js';

export interface Span {
  offset: number;
  /** Exclusive. */
  end: number;
}

export interface CoalescedRange<S extends Span> extends ByteRange {
  spans: S[];
}

/**
 * Merge compressed spans into as few ranges as possible: spans that overlap, touch, or lie within
 * `maxGap` bytes of each other share one range (fetching a small gap is cheaper than another
 * range). Each input span is attached to the range that contains it.
 */
export function coalesce<S extends Span>(spans: readonly S[], maxGap: number): Array<CoalescedRange<S>> {
  const sorted = [...spans].sort((a, b) => a.offset - b.offset || a.end - b.end);
  const out: Array<CoalescedRange<S>> = [];
  let cur: { offset: number; end: number; spans: S[] } | undefined;
  for (const s of sorted) {
    if (cur !== undefined && s.offset <= cur.end + maxGap) {
      cur.end = Math.max(cur.end, s.end);
      cur.spans.push(s);
      continue;
    }
    if (cur !== undefined) out.push({ offset: cur.offset, length: cur.end - cur.offset, spans: cur.spans });
    cur = { offset: s.offset, end: s.end, spans: [s] };
  }
  if (cur !== undefined) out.push({ offset: cur.offset, length: cur.end - cur.offset, spans: cur.spans });
  return out;
}
