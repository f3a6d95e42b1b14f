import { open, type FileHandle } from 'node:fs/promises';
import { StoreError } from './errors.js';

/**
 * Random access to an immutable byte sequence (a local blob, a registry blob, a test buffer).
 * The format layer reads only through this, so it never knows where bytes come from.
 */
export interface RangeReader {
  /** Total size in bytes. */
  readonly size: number;
  /**
   * Bytes [offset, offset+length). Must return exactly `length` bytes (callers clip to `size`)
   * or throw a StoreError; never a short buffer.
   */
  read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer>;
}

export function checkRange(size: number, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
    throw new StoreError('E_INVALID_ARGUMENT', `invalid range offset=${offset} length=${length}`);
  }
  if (offset + length > size) {
    throw new StoreError(
      'E_TRUNCATED',
      `range [${offset}, ${offset + length}) beyond end of blob (${size})`,
      {
        offset,
        length,
        size,
      },
    );
  }
}

export class BufferRangeReader implements RangeReader {
  constructor(private readonly buf: Buffer) {}
  get size(): number {
    return this.buf.length;
  }
  async read(offset: number, length: number): Promise<Buffer> {
    checkRange(this.buf.length, offset, length);
    return this.buf.subarray(offset, offset + length);
  }
}

export class FileRangeReader implements RangeReader {
  private constructor(
    private readonly fh: FileHandle,
    readonly size: number,
    readonly path: string,
  ) {}

  static async open(path: string): Promise<FileRangeReader> {
    const fh = await open(path, 'r');
    try {
      const st = await fh.stat();
      return new FileRangeReader(fh, st.size, path);
    } catch (err) {
      // do not leak the descriptor when stat fails
      await fh.close().catch(() => undefined);
      throw err;
    }
  }

  async read(offset: number, length: number): Promise<Buffer> {
    checkRange(this.size, offset, length);
    const buf = Buffer.allocUnsafe(length);
    let done = 0;
    while (done < length) {
      const { bytesRead } = await this.fh.read(buf, done, length - done, offset + done);
      if (bytesRead === 0) throw new StoreError('E_TRUNCATED', `unexpected end of ${this.path}`, { offset });
      done += bytesRead;
    }
    return buf;
  }

  async close(): Promise<void> {
    await this.fh.close();
  }
}
