/**
 * What the cache believes is on disk: chunk hex -> accounted bytes, in LRU order (Map insertion
 * order; a touch re-inserts). Also the pin sets. Pure bookkeeping, no I/O, so it is unit-testable
 * and every decision made from it is synchronous (no interleaving between decide and reserve).
 */
export class DiskIndex {
  private entries = new Map<string, number>();
  private readonly pinCounts = new Map<string, number>();
  private readonly pinSets = new Map<string, Set<string>>();
  private total = 0;

  get bytes(): number {
    return this.total;
  }

  get count(): number {
    return this.entries.size;
  }

  has(hex: string): boolean {
    return this.entries.has(hex);
  }

  touch(hex: string): void {
    const v = this.entries.get(hex);
    if (v !== undefined) {
      this.entries.delete(hex);
      this.entries.set(hex, v);
    }
  }

  /** Add (or refresh) an entry as the most recently used. */
  add(hex: string, bytes: number): void {
    this.remove(hex);
    this.entries.set(hex, bytes);
    this.total += bytes;
  }

  /** Remove an entry; returns its accounted bytes (0 if absent). */
  remove(hex: string): number {
    const v = this.entries.get(hex);
    if (v === undefined) return 0;
    this.entries.delete(hex);
    this.total -= v;
    return v;
  }

  /**
   * Adopt the start-up scan's entries (oldest first). They go BEFORE everything used since start
   * (more recent by definition); entries known already keep their place among the recent ones.
   * Only the entries touched since start are walked here, so this is cheap however big the scan.
   */
  adoptScanned(scanned: Map<string, number>): void {
    for (const [hex, bytes] of this.entries) {
      scanned.delete(hex);
      scanned.set(hex, bytes);
    }
    let t = 0;
    for (const v of scanned.values()) t += v;
    this.entries = scanned;
    this.total = t;
  }

  /**
   * Remove and return the least recently used unpinned entry. Pinned entries met on the way are
   * moved to the recent end so later searches do not walk over them again.
   */
  takeVictim(): { hex: string; bytes: number } | undefined {
    const skipped: string[] = [];
    let victim: { hex: string; bytes: number } | undefined;
    for (const [hex, bytes] of this.entries) {
      if (this.pinCounts.has(hex)) {
        skipped.push(hex);
        continue;
      }
      victim = { hex, bytes };
      break;
    }
    for (const hex of skipped) this.touch(hex);
    if (victim !== undefined) this.remove(victim.hex);
    return victim;
  }

  pin(layerKey: string, hexes: Iterable<string>): void {
    let set = this.pinSets.get(layerKey);
    if (set === undefined) {
      set = new Set();
      this.pinSets.set(layerKey, set);
    }
    for (const hex of hexes) {
      if (set.has(hex)) continue;
      set.add(hex);
      this.pinCounts.set(hex, (this.pinCounts.get(hex) ?? 0) + 1);
    }
  }

  unpin(layerKey: string): void {
    const set = this.pinSets.get(layerKey);
    if (set === undefined) return;
    this.pinSets.delete(layerKey);
    for (const hex of set) {
      const n = (this.pinCounts.get(hex) ?? 1) - 1;
      if (n <= 0) this.pinCounts.delete(hex);
      else this.pinCounts.set(hex, n);
    }
  }

  isPinned(hex: string): boolean {
    return this.pinCounts.has(hex);
  }

  isLayerPinned(layerKey: string): boolean {
    return this.pinSets.has(layerKey);
  }

  get pinnedCount(): number {
    return this.pinCounts.size;
  }
}
