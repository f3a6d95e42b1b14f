/**
 * A Map with a size bound and optional per-entry expiry, for the client's small caches (tag
 * answers, tokens, helper credentials) that would otherwise grow with every name a long-running
 * node ever sees. Insertion order is age order (a `set` moves the key to the end), so the bound
 * drops the oldest entries in O(1); expired entries are dropped when read and by a sweep whose
 * cost is amortised over the inserts that made it necessary.
 */
export class BoundedMap<V> {
  private readonly m = new Map<string, { v: V; expiresAt: number }>();
  private sweepAt: number;

  constructor(
    readonly maxEntries: number,
    private readonly now: () => number = Date.now,
  ) {
    this.sweepAt = Math.min(maxEntries, 64);
  }

  get size(): number {
    return this.m.size;
  }

  /** The value, unless absent or expired (an expired entry is removed). */
  get(k: string): V | undefined {
    const e = this.m.get(k);
    if (e === undefined) return undefined;
    if (e.expiresAt <= this.now()) {
      this.m.delete(k);
      return undefined;
    }
    return e.v;
  }

  /** `expiresAt` in ms since the epoch; omitted = only the size bound removes it. */
  set(k: string, v: V, expiresAt = Infinity): void {
    this.m.delete(k);
    this.m.set(k, { v, expiresAt });
    if (this.m.size >= this.sweepAt) {
      this.sweep();
      // next sweep after as many inserts again as entries survived: O(1) amortised per insert
      this.sweepAt = Math.max(64, 2 * this.m.size);
    }
    while (this.m.size > this.maxEntries) this.m.delete(this.m.keys().next().value as string);
  }

  delete(k: string): boolean {
    return this.m.delete(k);
  }

  /** Drop every expired entry. */
  sweep(): void {
    const now = this.now();
    for (const [k, e] of this.m) if (e.expiresAt <= now) this.m.delete(k);
  }

  keys(): IterableIterator<string> {
    return this.m.keys();
  }
}
