import type { BigIntStats } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { Lru } from '../util/lru.js';

/**
 * Chunk files this process has verified (hashed whole after reading, or written from verified
 * bytes), remembered by device, inode, size and change times. A slice of such a file is read
 * without hashing the whole chunk again: a 128 KiB FUSE read of a 4 MiB chunk would otherwise
 * read and hash 4 MiB, which made the in-memory LRU the only fast path and cost its memory.
 *
 * Why this is safe: any change through the file system (write, truncate, another file renamed
 * over it) gives a new inode or moves ctime, and the file is stat'ed right after it was verified,
 * so kernels with multigrain timestamps give the next change a distinct ctime even within one
 * clock tick. A file not remembered, or changed, is hashed whole again (ChunkCache.get). Bit rot
 * the file system does not see is caught by that whole-file hash on the first read after each
 * start, as before.
 */
/** Files remembered at most (about 150 bytes each); beyond it the oldest is hashed again. */
const MAX_STAMPS = 200_000;

export class VerifiedFiles {
  private readonly stamps: Lru<string, string>;

  constructor(maxEntries: number) {
    this.stamps = new Lru({ maxEntries: Math.max(1, Math.min(maxEntries, MAX_STAMPS)) });
  }

  has(hex: string): boolean {
    return this.stamps.has(hex);
  }

  /** Remember the open file as verified (the caller checked its bytes against `hex`). */
  async record(hex: string, fh: FileHandle): Promise<void> {
    try {
      this.stamps.set(hex, stampOf(await fh.stat({ bigint: true })));
    } catch {
      this.stamps.delete(hex);
    }
  }

  /** Remember a stat taken before the file's bytes were read and verified. */
  recordStat(hex: string, st: BigIntStats): void {
    this.stamps.set(hex, stampOf(st));
  }

  forget(hex: string): void {
    this.stamps.delete(hex);
  }

  /**
   * Copy bytes [from, to) of the verified file, `size` bytes long, into `out` at `pos`. False (and
   * forgotten unless only the size differs) when the file is not known as verified, is gone,
   * changed since, or is not `size` bytes long.
   */
  async readInto(
    hex: string,
    file: string,
    size: number,
    slice: { from: number; to: number },
    out: Buffer,
    pos: number,
  ): Promise<boolean> {
    const { from, to } = slice;
    const want = this.stamps.get(hex);
    if (want === undefined) return false;
    let fh: FileHandle;
    try {
      fh = await open(file, 'r');
    } catch {
      this.stamps.delete(hex);
      return false;
    }
    try {
      const st = await fh.stat({ bigint: true });
      if (stampOf(st) !== want) {
        this.stamps.delete(hex);
        return false;
      }
      if (st.size !== BigInt(size) || to > size) return false;
      let done = 0;
      while (done < to - from) {
        const { bytesRead } = await fh.read(out, pos + done, to - from - done, from + done);
        if (bytesRead === 0) {
          this.stamps.delete(hex);
          return false;
        }
        done += bytesRead;
      }
      return true;
    } catch {
      this.stamps.delete(hex);
      return false;
    } finally {
      await fh.close().catch(() => undefined);
    }
  }
}

/** Identity and change state of a file (one compact string per remembered file). */
export function stampOf(st: BigIntStats): string {
  return `${st.dev}:${st.ino}:${st.size}:${st.ctimeNs}:${st.mtimeNs}`;
}
