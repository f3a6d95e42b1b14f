import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';

/**
 * Create a file holding `data` with O_DIRECT writes: the bytes go from one reused, page-aligned
 * staging buffer to the disk without a page-cache copy. A cold model read writes each decoded
 * 4 MiB chunk to the chunk cache as it is read; written through the page cache that copy was
 * 21-31 % of the store's CPU in this VM (`copy_folio_from_iter_atomic`: every fresh page-cache
 * page faults), on the same two cores that inflate and verify (bench/README.md, session 29).
 *
 * Node has no aligned allocation and O_DIRECT refuses malloc's 16-byte alignment (EINVAL), so
 * the staging memory is a WebAssembly memory, which V8 maps whole and page-aligned. A write takes
 * one of its slots and copies one STAGE of `data` at a time into it (memory to memory, hot
 * pages), then writes that.
 *
 * Resolves the open handle (the caller renames, stamps and closes it). Rejects with code
 * `E_NO_DIRECT` when the file system refuses O_DIRECT (tmpfs, some overlays): the caller falls
 * back to a buffered write. Any other error is the write's own (ENOSPC, EIO, ...); the file is
 * then left for the caller to remove.
 */
export async function createFileDirect(path: string, data: Buffer, mode: number): Promise<FileHandle> {
  let fh: FileHandle;
  try {
    fh = await open(path, OPEN_FLAGS, mode);
  } catch (err) {
    throw (err as NodeJS.ErrnoException).code === 'EINVAL' ? noDirect(err) : err;
  }
  try {
    await withSlot((buf) => writeStaged(buf, fh, data, 0));
    if (data.length % ALIGN !== 0) await fh.truncate(data.length);
    return fh;
  } catch (err) {
    await fh.close().catch(() => undefined);
    // an fs that opens O_DIRECT files but refuses the writes (EINVAL) is one that has no O_DIRECT
    throw (err as NodeJS.ErrnoException).code === 'EINVAL' ? noDirect(err) : err;
  }
}

/**
 * Write `data` at `position` of a file opened with O_DIRECT, through the same staging memory
 * (the blob store's local compressed bytes: the aligned middle of each received span). Both
 * `position` and `data.length` must be multiples of DIRECT_ALIGN. Rejects with `E_NO_DIRECT` when
 * the file system refuses the write (EINVAL); any other error is the write's own.
 */
export async function writeDirectAt(fh: PositionalWriter, data: Uint8Array, position: number): Promise<void> {
  if (position % ALIGN !== 0 || data.length % ALIGN !== 0) {
    throw new RangeError(`direct write of ${data.length} bytes at ${position} is not ${ALIGN}-aligned`);
  }
  try {
    await withSlot((buf) => writeStaged(buf, fh, data, position));
  } catch (err) {
    throw (err as NodeJS.ErrnoException).code === 'EINVAL' ? noDirect(err) : err;
  }
}

/**
 * An existing file opened for direct writes (writeDirectAt). Rejects with `E_NO_DIRECT` when the
 * file system refuses O_DIRECT.
 */
export async function openDirectForWrite(path: string): Promise<FileHandle> {
  try {
    return await open(path, constants.O_WRONLY | constants.O_DIRECT);
  } catch (err) {
    throw (err as NodeJS.ErrnoException).code === 'EINVAL' ? noDirect(err) : err;
  }
}

/** The one method of a file handle a direct write uses (FileHandle, the blob store's handles). */
export interface PositionalWriter {
  write(
    buffer: Uint8Array,
    offset: number,
    length: number,
    position: number,
  ): Promise<{ bytesWritten: number }>;
}

/** O_DIRECT's alignment of memory, file offsets and lengths: the page size covers every device. */
const ALIGN = 4096;
export const DIRECT_ALIGN = ALIGN;
/** Bytes per write: a staging slot's size. */
const STAGE = 1 << 20;
/**
 * Slots of the staging memory (resident once used: SLOTS MiB). Writers run side by side, one slot
 * each: with one slot the chunk files and the local compressed bytes of a cold model read took
 * turns on it, each 1 MiB a disk round trip, and the 5 MiB spans waiting for their turn held the
 * store's peak RSS 10-45 MB higher (bench/README.md, session 30).
 */
const SLOTS = 4;
const WASM_PAGE = 64 << 10;
const OPEN_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_DIRECT;

let slots: Buffer[] | undefined;
/** Writers waiting for a slot, first come first served. */
const waiting: Array<(slot: Buffer) => void> = [];

/** The one WebAssembly API used (the project's TypeScript libs do not declare WebAssembly). */
interface WasmMemoryCtor {
  new (d: { initial: number; maximum: number }): { buffer: ArrayBuffer };
}

/** Run `fn` with a free staging slot (page-aligned, STAGE bytes), waiting for one if need be. */
async function withSlot<T>(fn: (slot: Buffer) => Promise<T>): Promise<T> {
  if (slots === undefined) {
    const pages = (SLOTS * STAGE) / WASM_PAGE;
    const { Memory } = (globalThis as unknown as { WebAssembly: { Memory: WasmMemoryCtor } }).WebAssembly;
    const mem = Buffer.from(new Memory({ initial: pages, maximum: pages }).buffer);
    slots = Array.from({ length: SLOTS }, (_, i) => mem.subarray(i * STAGE, (i + 1) * STAGE));
  }
  const slot = slots.pop() ?? (await new Promise<Buffer>((resolve) => waiting.push(resolve)));
  try {
    return await fn(slot);
  } finally {
    const next = waiting.shift();
    if (next !== undefined) next(slot);
    else slots.push(slot);
  }
}

async function writeStaged(buf: Buffer, fh: PositionalWriter, data: Uint8Array, base: number): Promise<void> {
  for (let at = 0; at < data.length; at += STAGE) {
    const n = Math.min(STAGE, data.length - at);
    buf.set(data.subarray(at, at + n), 0);
    // the last piece is padded to the alignment with zeros, cut off by the caller's truncate
    const padded = Math.ceil(n / ALIGN) * ALIGN;
    if (padded > n) buf.fill(0, n, padded);
    let done = 0;
    while (done < padded) {
      const { bytesWritten } = await fh.write(buf, done, padded - done, base + at + done);
      if (bytesWritten === 0) throw Object.assign(new Error('direct write wrote nothing'), { code: 'EIO' });
      done += bytesWritten;
    }
  }
}

function noDirect(cause: unknown): Error {
  return Object.assign(new Error('file system refuses O_DIRECT', { cause }), { code: 'E_NO_DIRECT' });
}
