/**
 * A small LRU of HTTP blocks shared by all blob readers of a client, bounded in bytes. It only
 * exists so that sequential small reads (a FUSE read loop, a footer then its TOC) do not ask the
 * registry for the same block twice; the real cache is the chunk store above the layer engine.
 */
export class BlockCache {
  private readonly map = new Map<string, Buffer>();
  private bytes = 0;

  constructor(readonly maxBytes: number) {}

  get(key: string): Buffer | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      // refresh recency
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  /** Presence check that does not refresh recency. */
  has(key: string): boolean {
    return this.map.has(key);
  }

  /** Stores a private copy, so a block never pins the (possibly large) response buffer it came from. */
  set(key: string, data: Buffer): void {
    if (data.length > this.maxBytes) return;
    const old = this.map.get(key);
    if (old) {
      this.bytes -= old.length;
      this.map.delete(key);
    }
    const copy = Buffer.allocUnsafe(data.length);
    data.copy(copy);
    this.map.set(key, copy);
    this.bytes += copy.length;
    while (this.bytes > this.maxBytes) {
      const oldest = this.map.keys().next();
      if (oldest.done) break;
      this.bytes -= this.map.get(oldest.value)!.length;
      this.map.delete(oldest.value);
    }
  }

  get size(): number {
    return this.bytes;
  }
}
