/**
 * In-memory LRU of verified chunk buffers, bounded in bytes. Map insertion order is the recency
 * order (a hit re-inserts the key), so eviction just walks from the oldest end.
 */
export class MemoryLru {
  private readonly map = new Map<string, Buffer>();
  private bytes = 0;

  constructor(private readonly maxBytes: number) {}

  get size(): number {
    return this.bytes;
  }

  /** The byte budget. */
  get limit(): number {
    return this.maxBytes;
  }

  get count(): number {
    return this.map.size;
  }

  get(key: string): Buffer | undefined {
    const buf = this.map.get(key);
    if (buf !== undefined) {
      this.map.delete(key);
      this.map.set(key, buf);
    }
    return buf;
  }

  has(key: string): boolean {
    return this.map.has(key);
  }

  set(key: string, buf: Buffer): void {
    // A buffer larger than a quarter of the budget would flush everything else for one entry.
    if (buf.length > this.maxBytes / 4) return;
    const old = this.map.get(key);
    if (old !== undefined) {
      this.map.delete(key);
      this.bytes -= old.length;
    }
    this.map.set(key, buf);
    this.bytes += buf.length;
    for (const [k, v] of this.map) {
      if (this.bytes <= this.maxBytes) break;
      this.map.delete(k);
      this.bytes -= v.length;
    }
  }

  delete(key: string): void {
    const old = this.map.get(key);
    if (old !== undefined) {
      this.map.delete(key);
      this.bytes -= old.length;
    }
  }

  clear(): void {
    this.map.clear();
    this.bytes = 0;
  }
}
