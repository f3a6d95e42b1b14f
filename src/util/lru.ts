/**
 * THE least-recently-used map of the store: bounded in entries and/or in a summed size, with
 * optional per-entry expiry. Map insertion order is the recency order (a hit or a `set` re-inserts
 * the key), so eviction walks from the oldest end in O(1) per entry. Expired entries are dropped
 * when read and by a sweep whose cost is amortised over the inserts that made it necessary (a
 * cache of short-lived answers never holds thousands of dead entries).
 */
export interface LruOptions<V> {
  /** Most entries held; default unbounded. */
  maxEntries?: number;
  /** Most summed `sizeOf` held; default unbounded. */
  maxSize?: number;
  /** Size of one value for `maxSize` (e.g. a buffer's length); default 1. */
  sizeOf?: (v: V) => number;
  /** Time for expiry, in the unit of `set`'s `expiresAt`; default Date.now. */
  now?: () => number;
}

interface Slot<V> {
  v: V;
  size: number;
  expiresAt: number;
}

export class Lru<K, V> {
  private readonly m = new Map<K, Slot<V>>();
  private readonly maxEntries: number;
  private readonly maxSize: number;
  private readonly sizeOf: (v: V) => number;
  private readonly now: () => number;
  private total = 0;
  private sweepAt: number;
  private expiring = 0;

  constructor(opts: LruOptions<V> = {}) {
    this.maxEntries = opts.maxEntries ?? Infinity;
    this.maxSize = opts.maxSize ?? Infinity;
    this.sizeOf = opts.sizeOf ?? (() => 1);
    this.now = opts.now ?? Date.now;
    this.sweepAt = Math.min(this.maxEntries, 64);
  }

  /** Entries held (expired ones not yet swept included). */
  get size(): number {
    return this.m.size;
  }

  /** Summed `sizeOf` of the entries held. */
  get totalSize(): number {
    return this.total;
  }

  /** The value, made the most recent; undefined when absent or expired (an expired entry is removed). */
  get(k: K): V | undefined {
    const e = this.live(k);
    if (e === undefined) return undefined;
    this.m.delete(k);
    this.m.set(k, e);
    return e.v;
  }

  /** The value without touching its recency. */
  peek(k: K): V | undefined {
    return this.live(k)?.v;
  }

  has(k: K): boolean {
    return this.live(k) !== undefined;
  }

  /**
   * Insert or replace as the most recent. `expiresAt` in the unit of `now` (omitted: only the
   * bounds remove it).
   */
  set(k: K, v: V, expiresAt = Infinity): void {
    this.delete(k);
    const size = this.sizeOf(v);
    this.m.set(k, { v, size, expiresAt });
    this.total += size;
    if (expiresAt !== Infinity) {
      this.expiring++;
      if (this.m.size >= this.sweepAt) {
        this.sweep();
        // next sweep after as many inserts again as entries survived: O(1) amortised per insert
        this.sweepAt = Math.max(64, 2 * this.m.size);
      }
    }
    for (const [key, e] of this.m) {
      if (this.m.size <= this.maxEntries && this.total <= this.maxSize) break;
      this.drop(key, e);
    }
  }

  delete(k: K): boolean {
    const e = this.m.get(k);
    if (e === undefined) return false;
    this.drop(k, e);
    return true;
  }

  clear(): void {
    this.m.clear();
    this.total = 0;
    this.expiring = 0;
  }

  /** Drop every expired entry. */
  sweep(): void {
    if (this.expiring === 0) return;
    const now = this.now();
    for (const [k, e] of this.m) if (e.expiresAt <= now) this.drop(k, e);
  }

  /** Keys, least recent first. */
  keys(): IterableIterator<K> {
    return this.m.keys();
  }

  /** [key, value] pairs, least recent first. */
  *entries(): IterableIterator<[K, V]> {
    for (const [k, e] of this.m) yield [k, e.v];
  }

  private live(k: K): Slot<V> | undefined {
    const e = this.m.get(k);
    if (e === undefined) return undefined;
    if (e.expiresAt !== Infinity && e.expiresAt <= this.now()) {
      this.drop(k, e);
      return undefined;
    }
    return e;
  }

  private drop(k: K, e: Slot<V>): void {
    this.m.delete(k);
    this.total -= e.size;
    if (e.expiresAt !== Infinity) this.expiring--;
  }
}
