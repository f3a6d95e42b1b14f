import { Lru } from '../util/lru.js';

/**
 * In-memory LRU of verified chunk buffers, bounded in bytes: the store's one LRU (util/lru.ts)
 * sized by buffer length, plus the rule that keeps one large entry from flushing all others.
 */
export class MemoryLru {
  private readonly lru: Lru<string, Buffer>;

  constructor(private readonly maxBytes: number) {
    this.lru = new Lru({ maxSize: maxBytes, sizeOf: (b) => b.length });
  }

  /** Bytes held. */
  get size(): number {
    return this.lru.totalSize;
  }

  /** The byte budget. */
  get limit(): number {
    return this.maxBytes;
  }

  get count(): number {
    return this.lru.size;
  }

  get(key: string): Buffer | undefined {
    return this.lru.get(key);
  }

  has(key: string): boolean {
    return this.lru.has(key);
  }

  set(key: string, buf: Buffer): void {
    // A buffer larger than a quarter of the budget would flush everything else for one entry.
    if (buf.length > this.maxBytes / 4) return;
    this.lru.set(key, buf);
  }

  delete(key: string): void {
    this.lru.delete(key);
  }

  clear(): void {
    this.lru.clear();
  }
}
