import { LRUCache } from 'lru-cache';

/**
 * THE least-recently-used map of the store: lru-cache (a well-kept library) behind the few options
 * the store uses, so every user gets the same settings: bounded in entries and/or in a summed size,
 * optional per-entry expiry on an injectable clock (tests use a manual one; `ttlResolution: 0` so
 * lru-cache never caches the time behind a timer).
 */
export interface LruOptions<V> {
  /** Most entries held. */
  maxEntries?: number;
  /** Most summed `sizeOf` held. */
  maxSize?: number;
  /** Size of one value for `maxSize` (e.g. a buffer's length); default 1. */
  sizeOf?: (v: V) => number;
  /** Time for expiry, in the unit of `set`'s `expiresAt`; default Date.now. */
  now?: () => number;
  /**
   * Called with each entry that leaves: evicted, deleted, replaced by `set`, expired, or cleared
   * (resources held by values, such as open files, are released here).
   */
  onRemove?: (v: V) => void;
}

/** Entry bounds up to this are preallocated by lru-cache (its fastest mode); larger ones grow. */
const PREALLOCATE_MAX = 10_000;

/** Added to the clock lru-cache sees (durations are unchanged). */
const CLOCK_OFFSET = 1;
/**
 * lru-cache calls an entry stale once its age is MORE than its ttl; ours expire AT `expiresAt`.
 * Half a unit less ttl makes the two agree for whole-unit clocks (Date.now, test clocks).
 */
const EXPIRY_EDGE = 0.5;

export class Lru<K extends NonNullable<unknown>, V extends NonNullable<unknown>> {
  private readonly c: LRUCache<K, V>;
  private readonly now: () => number;
  /** Size at which the next sweep of expired entries runs (lru-cache only drops them when read). */
  private sweepAt = 64;
  private readonly countAsSize: boolean;

  constructor(opts: LruOptions<V> = {}) {
    this.now = opts.now ?? Date.now;
    const sizeOf = opts.sizeOf;
    const bounded = (n: number | undefined): n is number => n !== undefined && Number.isFinite(n);
    if (!bounded(opts.maxEntries) && !bounded(opts.maxSize)) {
      throw new Error('Lru needs maxEntries or maxSize: an unbounded cache is a leak');
    }
    const maxEntries = bounded(opts.maxEntries) ? Math.max(1, Math.floor(opts.maxEntries)) : undefined;
    // lru-cache allocates `max` slots up front (~30 B each): a bound of 200,000 remembered files
    // costs 5.5 MB of an idle store. Large entry bounds are counted as a size instead, which
    // lru-cache grows on demand.
    const countAsSize = maxEntries !== undefined && maxEntries > PREALLOCATE_MAX && !bounded(opts.maxSize);
    const options: LRUCache.Options<K, V, unknown> = {
      ...(maxEntries !== undefined && !countAsSize ? { max: maxEntries } : {}),
      ...(countAsSize ? { maxSize: maxEntries, sizeCalculation: () => 1 } : {}),
      ...(bounded(opts.maxSize)
        ? {
            maxSize: Math.max(1, Math.floor(opts.maxSize)),
            // lru-cache wants positive integer sizes; an empty value still takes a slot
            sizeCalculation: (v: V) => Math.max(1, Math.ceil(sizeOf ? sizeOf(v) : 1)),
          }
        : {}),
      // lru-cache treats a start time of 0 as "no start": an injected clock may begin at 0
      perf: { now: () => this.now() + CLOCK_OFFSET },
      ...(opts.onRemove !== undefined ? { dispose: (v: V) => opts.onRemove?.(v) } : {}),
      ttlResolution: 0,
    } as LRUCache.Options<K, V, unknown>;
    this.c = new LRUCache<K, V>(options);
    this.countAsSize = countAsSize;
  }

  /** Entries held. */
  get size(): number {
    return this.c.size;
  }

  /** Summed `sizeOf` of the entries held (the entry count without `maxSize`). */
  get totalSize(): number {
    return this.c.maxSize > 0 && !this.countAsSize ? this.c.calculatedSize : this.c.size;
  }

  /** The value, made the most recent; undefined when absent or expired (an expired entry is removed). */
  get(k: K): V | undefined {
    return this.c.get(k);
  }

  /** The value without touching its recency. */
  peek(k: K): V | undefined {
    return this.c.peek(k);
  }

  has(k: K): boolean {
    return this.c.has(k);
  }

  /**
   * Insert or replace as the most recent. `expiresAt` in the unit of `now` (omitted: only the
   * bounds remove it).
   */
  set(k: K, v: V, expiresAt = Infinity): void {
    if (expiresAt === Infinity) {
      this.c.set(k, v);
      return;
    }
    const ttl = expiresAt - this.now() - EXPIRY_EDGE;
    // lru-cache reads a ttl of 0 as "never expires": an entry already expired is simply not kept
    if (!(ttl > 0)) {
      this.c.delete(k);
      return;
    }
    this.c.set(k, v, { ttl });
    // a cache of short-lived answers must not hold thousands of dead ones: sweep when the size
    // doubled since the last sweep (amortised O(1) per insert; no timers, so injected clocks work)
    if (this.c.size >= this.sweepAt) {
      this.c.purgeStale();
      this.sweepAt = Math.max(64, 2 * this.c.size);
    }
  }

  delete(k: K): boolean {
    return this.c.delete(k);
  }

  clear(): void {
    this.c.clear();
  }

  /** Drop every expired entry. */
  sweep(): void {
    this.c.purgeStale();
  }

  /** Keys, least recent first. */
  keys(): IterableIterator<K> {
    return this.c.rkeys();
  }

  /** [key, value] pairs, least recent first. */
  *entries(): IterableIterator<[K, V]> {
    for (const [k, v] of this.c.rentries()) yield [k, v] as [K, V];
  }
}
