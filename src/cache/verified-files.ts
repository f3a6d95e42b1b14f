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
/** Files remembered at most (about 150 bytes each with the key); beyond it the oldest is hashed again. */
const MAX_STAMPS = 200_000;
/**
 * Read handles kept open. A sequential reader takes a 4 MiB chunk in 32 FUSE reads of 128 KiB:
 * without a kept handle each of them cost open + fstat + read + close, four trips through the
 * thread pool, where read + fstat do. A few chunks per reader and layer are enough.
 */
const MAX_HANDLES = 16;

/** An open read handle of one verified chunk file, shared by concurrent reads. */
interface Handle {
  fh: Promise<FileHandle | undefined>;
  users: number;
  /** Left the handle table: closed once the last user is done. */
  dropped: boolean;
}

export class VerifiedFiles {
  private readonly stamps: Lru<string, string>;
  private readonly handles = new Lru<string, Handle>({
    maxEntries: MAX_HANDLES,
    onRemove: (h) => {
      h.dropped = true;
      if (h.users === 0) closeHandle(h);
    },
  });

  private closed = false;

  constructor(maxEntries: number) {
    this.stamps = new Lru({ maxEntries: Math.max(1, Math.min(maxEntries, MAX_STAMPS)) });
  }

  has(hex: string): boolean {
    return this.stamps.has(hex);
  }

  /** Remember the open file as verified (the caller checked its bytes against `hex`). */
  async record(hex: string, fh: FileHandle): Promise<void> {
    this.handles.delete(hex);
    try {
      this.stamps.set(hex, stampOf(await fh.stat({ bigint: true })));
    } catch {
      this.stamps.delete(hex);
    }
  }

  /** Remember a stat taken before the file's bytes were read and verified. */
  recordStat(hex: string, st: BigIntStats): void {
    this.handles.delete(hex);
    this.stamps.set(hex, stampOf(st));
  }

  forget(hex: string): void {
    this.handles.delete(hex);
    this.stamps.delete(hex);
  }

  /** Close every kept handle; later reads close theirs when done (the cache is closing). */
  close(): void {
    this.closed = true;
    this.handles.clear();
  }

  /**
   * Copy bytes [from, to) of the verified file, `size` bytes long, into `out` at `pos`. False (and
   * forgotten unless only the size differs) when the file is not known as verified, is gone,
   * changed since, or is not `size` bytes long.
   *
   * The stamp is checked AFTER the bytes are read through the (possibly kept) handle: a change
   * made before or while they were read moved ctime, or left the file unlinked (link count 0),
   * so the bytes are used only if the file was the verified one throughout.
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
    if (want === undefined || to > size) return false;
    const h = this.acquire(hex, file);
    try {
      const fh = await h.fh;
      if (fh === undefined) {
        this.forget(hex);
        return false;
      }
      let done = 0;
      while (done < to - from) {
        const { bytesRead } = await fh.read(out, pos + done, to - from - done, from + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      const st = await fh.stat({ bigint: true });
      // unlinked (evicted, or replaced by a rename) since verified: not the file any more, even if
      // its ctime did not move within one clock tick
      if (stampOf(st) !== want || st.nlink === 0n) {
        this.forget(hex);
        return false;
      }
      return st.size === BigInt(size) && done === to - from;
    } catch {
      this.forget(hex);
      return false;
    } finally {
      h.users--;
      if (h.dropped && h.users === 0) closeHandle(h);
    }
  }

  private acquire(hex: string, file: string): Handle {
    let h = this.handles.get(hex);
    if (h === undefined) {
      h = {
        fh: open(file, 'r').catch(() => undefined),
        users: 0,
        dropped: this.closed,
      };
      if (!this.closed) this.handles.set(hex, h);
    }
    h.users++;
    return h;
  }
}

function closeHandle(h: Handle): void {
  void h.fh.then((fh) => fh?.close()).catch(() => undefined);
}

/** Identity and change state of a file (one compact string per remembered file). */
export function stampOf(st: BigIntStats): string {
  // 40 raw bytes in a flat one-byte string (~56 B on the heap): the same fields as decimal text
  // joined with colons made a rope of ~14 strings, ~360 B per remembered file (7 MB of heap per
  // 20,000 verified chunk files, measured).
  try {
    STAMP.writeBigUInt64LE(st.dev, 0);
    STAMP.writeBigUInt64LE(st.ino, 8);
    STAMP.writeBigUInt64LE(st.size, 16);
    STAMP.writeBigInt64LE(st.ctimeNs, 24);
    STAMP.writeBigInt64LE(st.mtimeNs, 32);
  } catch {
    // a field beyond 64 bits (libuv gives none): spelled out after a character no packed stamp
    // (latin1 only) holds, so the two forms never compare equal
    return `\u0100${st.dev}:${st.ino}:${st.size}:${st.ctimeNs}:${st.mtimeNs}`;
  }
  return STAMP.toString('latin1');
}

/** Scratch for stampOf (synchronous: one buffer serves every call). */
const STAMP = Buffer.alloc(40);
