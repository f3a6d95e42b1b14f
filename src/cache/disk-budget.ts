import { statfs, unlink } from 'node:fs/promises';
import type { Logger } from '../util/logger.js';
import type { DiskIndex } from './disk-index.js';
import type { CachePaths } from './paths.js';

const BLOCK = 4096;
/** Disk footprint of a file of `size` bytes (ext4/xfs allocate whole blocks). */
export function footprint(size: number): number {
  return Math.max(BLOCK, Math.ceil(size / BLOCK) * BLOCK);
}

export interface DiskBudgetOptions {
  maxBytes: number;
  minFreeBytes: number;
  maxEntries: number;
  statfsIntervalMs: number;
}

/**
 * The chunk cache's disk bounds: bytes (chunk files + space reserved by writes in flight +
 * bytes accounted for others, the blob store), entries, and a free-space margin on the file
 * system (statfs, at most once per interval, corrected by what is known to be in flight).
 * Decides evictions (least recently used unpinned chunks first) and deletes the files.
 */
export class DiskBudget {
  reserved = 0;
  /** Disk bytes held outside the chunk files (the blob store's compressed bytes). */
  external = 0;
  evictions = 0;
  private freeEstimate = Number.POSITIVE_INFINITY;
  private freeCheckedAt = 0;
  private readonly unlinks = new Set<Promise<void>>();

  constructor(
    private readonly index: DiskIndex,
    private readonly paths: CachePaths,
    private readonly opts: DiskBudgetOptions,
    private readonly logger: Logger,
    /** Told of each chunk file about to be unlinked. */
    private readonly onUnlink: (hex: string) => void = () => undefined,
  ) {}

  private overBytes(bytes: number): boolean {
    return this.index.bytes + this.reserved + this.external + bytes > this.opts.maxBytes;
  }

  private overHard(bytes: number, entries: number): boolean {
    return (
      this.index.count + entries > this.opts.maxEntries || this.freeEstimate - bytes < this.opts.minFreeBytes
    );
  }

  /**
   * Decide synchronously which entries to evict so that `bytes` more fit under maxBytes, the
   * entry bound and the free-space margin. Returns undefined when it cannot fit; pinned chunks may
   * exceed maxBytes (pinning is an explicit request) but never the free-space margin. `entries`:
   * index entries the new bytes add (0 for bytes held outside the index).
   */
  makeRoom(bytes: number, pinned: boolean, entries = 1): Array<{ hex: string; bytes: number }> | undefined {
    if (!pinned && bytes > this.opts.maxBytes) return undefined;
    const victims: Array<{ hex: string; bytes: number }> = [];
    while (this.overBytes(bytes) || this.overHard(bytes, entries)) {
      const v = this.index.takeVictim();
      if (v === undefined) break;
      victims.push(v);
      this.freeEstimate += v.bytes;
    }
    if (this.overHard(bytes, entries) || (this.overBytes(bytes) && !pinned)) {
      // Cannot fit: the victims are already out of the index, so still delete them (they were the
      // least useful anyway) but do not write.
      for (const v of victims) this.unlinkChunk(v.hex);
      return undefined;
    }
    return victims;
  }

  /** `bytes` are about to be written (after makeRoom): count them until settled. */
  take(bytes: number): void {
    this.reserved += bytes;
    this.freeEstimate -= bytes;
  }

  /** A write of `bytes` ended; `failed`: nothing stays on disk. */
  settle(bytes: number, failed: boolean): void {
    this.reserved -= bytes;
    if (failed) this.freeEstimate += bytes;
  }

  evictForEntries(): void {
    while (this.index.count > this.opts.maxEntries) {
      const v = this.index.takeVictim();
      if (v === undefined) return;
      this.unlinkChunk(v.hex);
    }
  }

  unlinkChunk(hex: string): void {
    this.evictions++;
    this.onUnlink(hex);
    const p: Promise<void> = unlink(this.paths.chunkFile(hex))
      .catch(() => undefined)
      .finally(() => this.unlinks.delete(p));
    this.unlinks.add(p);
  }

  /** Every eviction decided so far has reached the disk. */
  async unlinked(): Promise<void> {
    await Promise.all([...this.unlinks]);
  }

  async refreshFree(force = false): Promise<void> {
    if (this.opts.minFreeBytes === 0) return;
    const now = Date.now();
    if (!force && now - this.freeCheckedAt < this.opts.statfsIntervalMs) return;
    this.freeCheckedAt = now;
    try {
      const st = await statfs(this.paths.base);
      // Space still to be written by in-flight puts is not yet visible to statfs.
      this.freeEstimate = st.bavail * st.bsize - this.reserved;
    } catch (err) {
      this.logger.warn({ err }, 'statfs on cache directory failed');
    }
  }

  /** Account `bytes` held by someone else, evicting to make room. False: they do not fit. */
  async reserveExternal(bytes: number): Promise<boolean> {
    await this.refreshFree();
    const victims = this.makeRoom(bytes, false);
    if (victims === undefined) return false;
    for (const v of victims) this.unlinkChunk(v.hex);
    this.external += bytes;
    this.freeEstimate -= bytes;
    return true;
  }

  releaseExternal(bytes: number): void {
    const n = Math.min(this.external, Math.max(0, bytes));
    this.external -= n;
    this.freeEstimate += n;
  }

  /**
   * Enforce the bounds on what an earlier run (maybe with larger bounds) left behind, in batches
   * so a large backlog neither floods the thread pool nor holds many promises.
   */
  async enforce(): Promise<void> {
    await this.refreshFree(true);
    for (;;) {
      let batch = 0;
      while (
        batch < 1000 &&
        (this.overBytes(0) || this.index.count > this.opts.maxEntries || this.overHard(0, 0))
      ) {
        const v = this.index.takeVictim();
        if (v === undefined) break;
        this.freeEstimate += v.bytes;
        this.unlinkChunk(v.hex);
        batch++;
      }
      await this.unlinked();
      if (batch < 1000) break;
    }
  }
}
