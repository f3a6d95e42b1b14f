import { createInflateRaw, crc32 } from 'node:zlib';
import { StoreError, type ErrorCode, type ErrorContext } from '../../util/errors.js';

/** RFC 1952 header flags. */
const FHCRC = 0x02;
const FEXTRA = 0x04;
const FNAME = 0x08;
const FCOMMENT = 0x10;
const FRESERVED = 0xe0;

export interface GzipHeader {
  /** Bytes taken by the header (where the deflate data starts). */
  length: number;
  /** The FEXTRA field when present (XLEN bytes, without the XLEN itself). */
  extra?: Buffer;
}

/**
 * Parse one gzip member header strictly (magic, CM=deflate, no reserved flags, optional
 * FEXTRA/FNAME/FCOMMENT/FHCRC with a checked header CRC). Throws StoreError(code) otherwise.
 */
export function parseGzipHeader(buf: Buffer, code: ErrorCode, context: ErrorContext = {}): GzipHeader {
  const bad = (why: string): StoreError => new StoreError(code, `invalid gzip header: ${why}`, context);
  if (buf.length < 10) throw bad('too short');
  if (buf[0] !== 0x1f || buf[1] !== 0x8b) throw bad('bad magic');
  if (buf[2] !== 8) throw bad('compression method is not deflate');
  const flags = buf[3]!;
  if ((flags & FRESERVED) !== 0) throw bad('reserved flag bits set');
  let pos = 10;
  let extra: Buffer | undefined;
  if (flags & FEXTRA) {
    if (pos + 2 > buf.length) throw bad('truncated extra length');
    const xlen = buf.readUInt16LE(pos);
    pos += 2;
    if (pos + xlen > buf.length) throw bad('truncated extra field');
    extra = buf.subarray(pos, pos + xlen);
    pos += xlen;
  }
  for (const flag of [FNAME, FCOMMENT]) {
    if (flags & flag) {
      const nul = buf.indexOf(0, pos);
      if (nul < 0) throw bad('unterminated name/comment');
      pos = nul + 1;
    }
  }
  if (flags & FHCRC) {
    if (pos + 2 > buf.length) throw bad('truncated header crc');
    const want = buf.readUInt16LE(pos);
    if ((crc32(buf.subarray(0, pos)) & 0xffff) !== want) throw bad('header crc mismatch');
    pos += 2;
  }
  return extra === undefined ? { length: pos } : { length: pos, extra };
}

export interface InflatedMember {
  header: GzipHeader;
  /** Decompressed payload, CRC32 and ISIZE checked. */
  data: Buffer;
  /** Total compressed length of the member (header + deflate + 8-byte trailer). */
  memberLength: number;
}

export interface InflateOptions {
  /** Decompressed bytes allowed; more -> StoreError('E_TOC_TOO_LARGE'). */
  maxOutput: number;
  /** Code used for malformed input. */
  code: ErrorCode;
  context?: ErrorContext;
  signal?: AbortSignal;
}

/**
 * Decompress exactly ONE gzip member at the start of `buf` (no multistream: bytes after the
 * member's trailer are never interpreted). Runs on the zlib thread pool.
 */
export async function inflateOneMember(buf: Buffer, opts: InflateOptions): Promise<InflatedMember> {
  const context = opts.context ?? {};
  const header = parseGzipHeader(buf, opts.code, context);
  const body = buf.subarray(header.length);
  const { data, consumed } = await inflateRaw(body, opts);
  const trailerAt = header.length + consumed;
  if (trailerAt + 8 > buf.length) {
    throw new StoreError(opts.code, 'gzip member is truncated (no trailer)', context);
  }
  const wantCrc = buf.readUInt32LE(trailerAt);
  const wantSize = buf.readUInt32LE(trailerAt + 4);
  if (crc32(data) !== wantCrc || data.length % 2 ** 32 !== wantSize) {
    throw new StoreError(opts.code, 'gzip member trailer (CRC32/ISIZE) does not match its data', context);
  }
  return { header, data, memberLength: trailerAt + 8 };
}

/** Raw inflate until the end of the deflate stream; reports how many input bytes it used. */
async function inflateRaw(body: Buffer, opts: InflateOptions): Promise<{ data: Buffer; consumed: number }> {
  const context = opts.context ?? {};
  return await new Promise((resolve, reject) => {
    const inflater = createInflateRaw();
    const parts: Buffer[] = [];
    let total = 0;
    let settled = false;
    const fail = (err: StoreError): void => {
      if (settled) return;
      settled = true;
      opts.signal?.removeEventListener('abort', onAbort);
      inflater.destroy();
      reject(err);
    };
    const onAbort = (): void => fail(new StoreError('E_ABORTED', 'aborted while decompressing', context));
    if (opts.signal?.aborted) {
      onAbort();
      return;
    }
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    inflater.on('data', (chunk: Buffer) => {
      total += chunk.length;
      if (total > opts.maxOutput) {
        fail(
          new StoreError(
            'E_TOC_TOO_LARGE',
            `decompressed data exceeds the limit of ${opts.maxOutput} bytes`,
            {
              ...context,
              limit: opts.maxOutput,
            },
          ),
        );
        return;
      }
      parts.push(chunk);
    });
    inflater.on('error', (err: Error) => {
      fail(new StoreError(opts.code, `cannot inflate gzip data: ${err.message}`, context));
    });
    inflater.on('end', () => {
      if (settled) return;
      settled = true;
      opts.signal?.removeEventListener('abort', onAbort);
      resolve({ data: Buffer.concat(parts, total), consumed: inflater.bytesWritten });
    });
    inflater.end(body);
  });
}
