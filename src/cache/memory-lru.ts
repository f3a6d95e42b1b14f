import { Lru } from '../util/lru.js';

/** A kept buffer, how many of its bytes no reader has taken yet, and when it was last used. */
interface Entry {
  key: string;
  buf: Buffer;
  unread: number;
  usedAt: number;
}

/**
 * In-memory LRU of verified chunk buffers, bounded in bytes: the store's one LRU (util/lru.ts)
 * sized by buffer length, plus the rule that keeps one large entry from flushing all others, and
 * a count of the bytes of each entry no reader has taken yet (`consume`).
 */
export class MemoryLru {
  private readonly lru: Lru<string, Entry>;

  /**
   * `now`: a monotonic clock in ms for `dropUnused` (tests inject one). `onDrop`: each buffer that
   * leaves (evicted, deleted, replaced, cleared), with its key: the owner may release it
   * (ChunkCache.retire).
   */
  constructor(
    private readonly maxBytes: number,
    private readonly now: () => number = () => performance.now(),
    onDrop?: (key: string, buf: Buffer) => void,
  ) {
    this.lru = new Lru({
      maxSize: maxBytes,
      sizeOf: (e) => e.buf.length,
      ...(onDrop !== undefined ? { onRemove: (e: Entry) => onDrop(e.key, e.buf) } : {}),
    });
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
    const e = this.lru.get(key);
    if (e === undefined) return undefined;
    e.usedAt = this.now();
    return e.buf;
  }

  /** The buffer without touching its recency. */
  peek(key: string): Buffer | undefined {
    return this.lru.peek(key)?.buf;
  }

  has(key: string): boolean {
    return this.lru.has(key);
  }

  /** Keep `buf`; false when it is not kept (larger than a quarter of the budget, or no budget). */
  set(key: string, buf: Buffer): boolean {
    // A buffer larger than a quarter of the budget would flush everything else for one entry.
    if (buf.length > this.maxBytes / 4) return false;
    this.lru.set(key, { key, buf: ownedCopy(buf), unread: buf.length, usedAt: this.now() });
    return true;
  }

  /**
   * Drop the entries unused for `idleMs` or more that `mayDrop` allows (the caller's rule: another
   * copy exists). Returns the bytes dropped.
   */
  dropUnused(idleMs: number, mayDrop: (key: string) => boolean): number {
    const cutoff = this.now() - idleMs;
    const gone: string[] = [];
    let bytes = 0;
    for (const [key, e] of this.lru.entries()) {
      if (e.usedAt <= cutoff && mayDrop(key)) {
        gone.push(key);
        bytes += e.buf.length;
      }
    }
    for (const key of gone) this.lru.delete(key);
    return bytes;
  }

  /**
   * A reader took `bytes` of the entry; true once it took as many as the entry holds (the caller
   * then decides whether the entry may go). A range taken twice counts twice: the entry may then
   * go early, and a later miss costs a decode, never wrong bytes.
   */
  consume(key: string, bytes: number): boolean {
    const e = this.lru.peek(key);
    if (e === undefined || !(bytes > 0)) return false;
    e.usedAt = this.now();
    e.unread -= bytes;
    return e.unread <= 0;
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
