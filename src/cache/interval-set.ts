/** Half-open byte range [start, end). */
export interface Interval {
  start: number;
  end: number;
}

/**
 * A set of byte offsets kept as sorted, disjoint, non-adjacent half-open intervals (touching
 * intervals are merged, so the list is canonical and two equal sets have equal lists). Pure
 * bookkeeping, no I/O: the blob store's coverage and its in-flight writes are both one of these.
 * Lookups are binary searches; an insert splices the array (coverage of a blob fetched in big
 * ranges stays a handful of intervals, so this is cheap in practice).
 */
export class IntervalSet {
  private readonly list: Interval[] = [];
  private total = 0;

  /** Build from any list of intervals (unsorted, overlapping and empty ones allowed). */
  static from(intervals: Iterable<Interval>): IntervalSet {
    const set = new IntervalSet();
    for (const iv of intervals) set.add(iv.start, iv.end);
    return set;
  }

  /** Sum of the lengths of the intervals. */
  get size(): number {
    return this.total;
  }

  /** Number of disjoint intervals. */
  get count(): number {
    return this.list.length;
  }

  /** A copy of the intervals, sorted. */
  intervals(): Interval[] {
    return this.list.map((iv) => ({ start: iv.start, end: iv.end }));
  }

  clone(): IntervalSet {
    return IntervalSet.from(this.list);
  }

  /** Index of the first interval whose end is >= `pos` (an interval touching `pos` counts). */
  private firstEndingAtOrAfter(pos: number): number {
    let lo = 0;
    let hi = this.list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.list[mid]!.end < pos) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Add [start, end); merges with every interval it overlaps or touches. */
  add(start: number, end: number): void {
    if (!(end > start)) return;
    const i = this.firstEndingAtOrAfter(start);
    let j = i;
    let s = start;
    let e = end;
    while (j < this.list.length && this.list[j]!.start <= end) {
      const iv = this.list[j]!;
      s = Math.min(s, iv.start);
      e = Math.max(e, iv.end);
      this.total -= iv.end - iv.start;
      j++;
    }
    this.list.splice(i, j - i, { start: s, end: e });
    this.total += e - s;
  }

  /** Remove [start, end) from the set. */
  delete(start: number, end: number): void {
    if (!(end > start)) return;
    let i = this.firstEndingAtOrAfter(start);
    // an interval ending exactly at `start` does not overlap
    if (i < this.list.length && this.list[i]!.end === start) i++;
    const keep: Interval[] = [];
    let j = i;
    while (j < this.list.length && this.list[j]!.start < end) {
      const iv = this.list[j]!;
      this.total -= iv.end - iv.start;
      if (iv.start < start) keep.push({ start: iv.start, end: start });
      if (iv.end > end) keep.push({ start: end, end: iv.end });
      j++;
    }
    for (const k of keep) this.total += k.end - k.start;
    this.list.splice(i, j - i, ...keep);
  }

  /** True when every byte of [start, end) is in the set (an empty range is always covered). */
  covers(start: number, end: number): boolean {
    if (!(end > start)) return true;
    const i = this.firstEndingAtOrAfter(start + 1);
    const iv = this.list[i];
    return iv !== undefined && iv.start <= start && iv.end >= end;
  }

  /** The parts of [start, end) NOT in the set, in order. */
  missing(start: number, end: number): Interval[] {
    const out: Interval[] = [];
    if (!(end > start)) return out;
    let pos = start;
    for (let i = this.firstEndingAtOrAfter(start + 1); i < this.list.length && pos < end; i++) {
      const iv = this.list[i]!;
      if (iv.start >= end) break;
      if (iv.start > pos) out.push({ start: pos, end: iv.start });
      pos = Math.max(pos, iv.end);
    }
    if (pos < end) out.push({ start: pos, end });
    return out;
  }

  /** The parts of [start, end) that ARE in the set, in order. */
  overlap(start: number, end: number): Interval[] {
    const out: Interval[] = [];
    if (!(end > start)) return out;
    for (let i = this.firstEndingAtOrAfter(start + 1); i < this.list.length; i++) {
      const iv = this.list[i]!;
      if (iv.start >= end) break;
      out.push({ start: Math.max(start, iv.start), end: Math.min(end, iv.end) });
    }
    return out;
  }

  /** Bytes of [start, end) in the set. */
  coveredBytes(start: number, end: number): number {
    let n = 0;
    for (const iv of this.overlap(start, end)) n += iv.end - iv.start;
    return n;
  }
}
