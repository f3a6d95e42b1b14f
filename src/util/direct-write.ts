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
 * the staging buffer is a WebAssembly memory, which V8 maps whole and page-aligned. Writes take
 * turns on it; each copies one STAGE of `data` in (memory to memory, hot pages) and writes it.
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
    const turn = staging.then(() => writeStaged(fh, data));
    staging = turn.catch(() => undefined);
    await turn;
    if (data.length % ALIGN !== 0) await fh.truncate(data.length);
    return fh;
  } catch (err) {
    await fh.close().catch(() => undefined);
    // an fs that opens O_DIRECT files but refuses the writes (EINVAL) is one that has no O_DIRECT
    throw (err as NodeJS.ErrnoException).code === 'EINVAL' ? noDirect(err) : err;
  }
}

/** O_DIRECT's alignment of memory, file offsets and lengths: the page size covers every device. */
const ALIGN = 4096;
/** Bytes per write: the staging buffer's size (1 MiB resident, once). */
const STAGE = 1 << 20;
const WASM_PAGE = 64 << 10;
const OPEN_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_DIRECT;

let stage: Buffer | undefined;
/** The turn of the last write queued on the staging buffer. */
let staging: Promise<void> = Promise.resolve();

/** The one WebAssembly API used (the project's TypeScript libs do not declare WebAssembly). */
interface WasmMemoryCtor {
  new (d: { initial: number; maximum: number }): { buffer: ArrayBuffer };
}

function stagingBuffer(): Buffer {
  const pages = STAGE / WASM_PAGE;
  const { Memory } = (globalThis as unknown as { WebAssembly: { Memory: WasmMemoryCtor } }).WebAssembly;
  stage ??= Buffer.from(new Memory({ initial: pages, maximum: pages }).buffer);
  return stage;
}

async function writeStaged(fh: FileHandle, data: Buffer): Promise<void> {
  const buf = stagingBuffer();
  for (let at = 0; at < data.length; at += STAGE) {
    const n = Math.min(STAGE, data.length - at);
    data.copy(buf, 0, at, at + n);
    // the last piece is padded to the alignment with zeros, cut off by the caller's truncate
    const padded = Math.ceil(n / ALIGN) * ALIGN;
    if (padded > n) buf.fill(0, n, padded);
    let done = 0;
    while (done < padded) {
      const { bytesWritten } = await fh.write(buf, done, padded - done, at + done);
      if (bytesWritten === 0) throw Object.assign(new Error('direct write wrote nothing'), { code: 'EIO' });
      done += bytesWritten;
    }
  }
}

function noDirect(cause: unknown): Error {
  return Object.assign(new Error('file system refuses O_DIRECT', { cause }), { code: 'E_NO_DIRECT' });
}
