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

  /** Keep `buf`; false when it is not kept (larger than a quarter of the budget, or no budget). */
  set(key: string, buf: Buffer): boolean {
    // A buffer larger than a quarter of the budget would flush everything else for one entry.
    if (buf.length > this.maxBytes / 4) return false;
    this.lru.set(key, ownedCopy(buf));
    return true;
  }

  delete(key: string): void {
    this.lru.delete(key);
  }

  clear(): void {
    this.lru.clear();
  }
}

/**
 * Keep only the chunk's own bytes alive, not a larger buffer it may be a view of: a decompression
 * buffer, or (small chunks) Node's shared allocation slab, 64 KiB on Node 24, which one cached
 * 1 KiB file would otherwise pin whole. The copy is exact-size (allocUnsafeSlow: not from a slab).
 */
function ownedCopy(data: Buffer): Buffer {
  if (data.buffer.byteLength <= data.length * 1.25) return data;
  const own = Buffer.allocUnsafeSlow(data.length);
  data.copy(own);
  return own;
}
