/**
 * An append-only list of numbers in a Float64Array that doubles as it fills: 8 B per number
 * where a JS array of mixed integers and doubles costs 8-24 and grows by copying into a new
 * backing store just the same. For per-entry bookkeeping of huge TOCs.
 */
export class NumberList {
  private items: Float64Array;
  length = 0;

  constructor(capacity = 1024) {
    this.items = new Float64Array(Math.max(1, capacity));
  }

  push(n: number): void {
    if (this.length === this.items.length) this.grow(this.length + 1);
    this.items[this.length++] = n;
  }

  private grow(capacity: number): void {
    let size = this.items.length;
    while (size < capacity) size *= 2;
    const bigger = new Float64Array(size);
    bigger.set(this.items.subarray(0, this.length));
    this.items = bigger;
  }

  at(i: number): number {
    if (!(i >= 0 && i < this.length)) throw new RangeError(`index ${i} outside [0, ${this.length})`);
    return this.items[i]!;
  }

  /** The numbers pushed so far and `extra` free places after them, sharing the list's memory. */
  view(extra = 0): Float64Array {
    if (this.length + extra > this.items.length) this.grow(this.length + extra);
    return this.items.subarray(0, this.length + extra);
  }
}
