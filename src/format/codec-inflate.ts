import { createRequire } from 'node:module';
import type { Transform } from 'node:stream';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import * as zlib from 'node:zlib';

/**
 * Decompress the part of a chunk's compressed span that the chunk needs, and no further: bytes
 * after it (trailing tar headers, other files sharing the member, a bomb) are never produced.
 * gzip inflates on libuv's thread pool (the main thread, the FUSE server, only parses member
 * headers and collects output); zstd decodes on the main thread in small steps (see zstdRange).
 * No worker threads: a worker heap cost ~18 MiB of RSS each and every span had to be copied to it.
 *
 * The gzip output step (`chunkSize`) is the number of bytes still needed, so a chunk of up to
 * MAX_STEP bytes inflates in one thread-pool job, into a buffer of exactly its size when the chunk
 * starts its member (innerOffset 0: no slack to copy away before caching, no second pass).
 */

/**
 * Largest output step: bigger chunks arrive in steps copied into one buffer of the needed size.
 * Each step is a fresh buffer that lives until the next GC, so it also bounds that garbage.
 */
const MAX_STEP = 4 << 20;
/** zlib's smallest allowed chunkSize. */
const MIN_STEP = 64;
/** Size of the gzip trailer (CRC32 + ISIZE) after each member's deflate data. */
const GZIP_TRAILER = 8;

/**
 * A decoded chunk's buffer: its own memory, never a slice of Node's shared allocation slab
 * (Buffer.allocUnsafe slices one for sizes under 32 KiB on Node 24). A slab slice cannot be
 * released (util/release-buffer.ts) and the memory LRU keeps a copy of it instead: a cold
 * zstd:chunked model read (many chunks under 32 KiB) left ~9 MB of slabs waiting for a collection
 * at its peak, and copied every small chunk once more.
 */
const ownBuffer = (n: number): Buffer => Buffer.allocUnsafeSlow(n);

/**
 * Collects decoder output bytes [skip, want): one step's buffer as is when it holds them all,
 * else copied into one buffer of their size. Output before `skip` is dropped as it arrives, so a
 * chunk deep inside a long member costs its own size, not the member's.
 */
class Window {
  private first: Buffer | undefined;
  private out: Buffer | undefined;
  /** Decoder output bytes seen so far (including the skipped ones). */
  produced = 0;

  constructor(
    readonly skip: number,
    readonly want: number,
  ) {}

  get full(): boolean {
    return this.produced >= this.want;
  }

  add(d: Buffer): void {
    const from = Math.max(0, this.skip - this.produced);
    const to = Math.min(d.length, this.want - this.produced);
    this.produced += d.length;
    if (to <= from) return;
    const piece = d.subarray(from, to);
    const at = this.produced - d.length + from - this.skip;
    if (at === 0 && this.out === undefined && this.first === undefined) {
      this.first = piece;
      return;
    }
    if (this.out === undefined) {
      this.out = ownBuffer(this.want - this.skip);
      this.first?.copy(this.out, 0);
      this.first = undefined;
    }
    piece.copy(this.out, at);
  }

  result(): Buffer {
    const n = Math.max(0, Math.min(this.produced, this.want) - this.skip);
    if (this.out !== undefined) return this.out.subarray(0, n);
    return this.first ?? Buffer.alloc(0);
  }
}

const stepFor = (want: number): number => Math.max(MIN_STEP, Math.min(MAX_STEP, want));

/**
 * Run `src` through `dec` until `want` bytes came out or the stream ended. Resolves the bytes
 * (possibly fewer than `want`) and, when the stream ended by itself, the input bytes it consumed.
 */
function drain(
  dec: Transform & { bytesWritten: number },
  src: Buffer,
  out: Window,
): Promise<{ consumed: number | undefined }> {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (err: Error | null, consumed?: number): void => {
      if (done) return;
      done = true;
      dec.destroy();
      if (err !== null) reject(err);
      else resolve({ consumed });
    };
    dec.on('data', (d: Buffer) => {
      out.add(d);
      if (out.full) finish(null);
    });
    dec.on('error', (err: Error) => finish(err));
    dec.on('end', () => finish(null, dec.bytesWritten));
    dec.end(src);
  });
}

/**
 * Offset of the deflate data of the gzip member at the start of src (RFC 1952 header). Members
 * are inflated raw, one at a time, and the next member is only touched while the chunk still
 * needs bytes: the bytes after the member that completes a chunk belong to other files (maybe a
 * broken member a hostile TOC points into) and must never fail it. zlib's gunzip would go on into
 * any following member and fail on its neighbour's damage.
 */
export function gzipBodyOffset(src: Buffer): number {
  if (src.length < 10 || src[0] !== 0x1f || src[1] !== 0x8b) throw new Error('not a gzip member (bad magic)');
  if (src[2] !== 8) throw new Error(`unknown gzip compression method ${src[2]}`);
  const flags = src[3]!;
  if ((flags & 0xe0) !== 0) throw new Error('reserved gzip header flags set');
  let pos = 10;
  if ((flags & 4) !== 0) {
    if (pos + 2 > src.length) throw new Error('truncated gzip header');
    pos += 2 + src.readUInt16LE(pos);
  }
  for (const bit of [8, 16]) {
    if ((flags & bit) !== 0) {
      const end = src.indexOf(0, pos);
      if (end < 0) throw new Error('truncated gzip header');
      pos = end + 1;
    }
  }
  if ((flags & 2) !== 0) pos += 2;
  if (pos > src.length) throw new Error('truncated gzip header');
  return pos;
}

/**
 * Bytes [skip, need) of the data of the gzip members starting at src (fewer if the data ends
 * first); nothing after `need` is inflated.
 */
export async function gunzipRange(src: Buffer, skip: number, need: number): Promise<Buffer> {
  const out = new Window(skip, need);
  let pos = 0;
  while (!out.full && pos < src.length) {
    const body = pos + gzipBodyOffset(src.subarray(pos));
    // One step up to `need` (at most MAX_STEP): skipping a long prefix in chunk-sized steps would
    // cost one thread-pool round trip per step. The wanted bytes may then be a view into a step
    // buffer holding the prefix too; the cache keeps an exact copy (cache/chunk-cache.ts).
    const dec = zlib.createInflateRaw({ chunkSize: stepFor(need - out.produced) });
    const { consumed } = await drain(dec, src.subarray(body), out);
    if (consumed === undefined) break;
    pos = body + consumed + GZIP_TRAILER;
  }
  return out.result();
}

interface ZstdNapi {
  DCtx: new () => DCtx;
  ResetDirective: { sessionOnly: number };
}

interface DCtx {
  reset(directive: number): void;
  decompressStream(out: Buffer, src: Buffer): [number, number, number];
}

let napi: ZstdNapi | undefined;
/** Idle decoder contexts (a context holds its window: reused, not made per chunk). */
const idle: DCtx[] = [];
const MAX_IDLE = 4;
/** Output step: the event loop runs between steps of a large chunk. */
const ZSTD_STEP = 1 << 20;
/** Where skipped output goes (each step is synchronous, so one buffer serves every call). */
const scratch = Buffer.allocUnsafe(ZSTD_STEP);

/**
 * Bytes [skip, need) of the data of the zstd frames in src (fewer if the data ends first).
 * Frames usually hold exactly one chunk, but the stargz zstd flavour appends tar headers after
 * it; skippable frames produce nothing. Decoded here with zstd-napi, in steps of at most
 * ZSTD_STEP output bytes with the event loop served between them. Measured on the lab's
 * zstd:chunked model layer (54 KiB chunks on average): 2.1 ms of CPU per MB this way, against
 * 5-7 ms through Node's zlib zstd stream per chunk (a decoder context and a thread-pool hop each)
 * and 4.8 ms in the former worker pool.
 */
export async function zstdRange(src: Buffer, skip: number, need: number): Promise<Buffer> {
  napi ??= createRequire(import.meta.url)('zstd-napi/binding') as ZstdNapi;
  const ctx = idle.pop() ?? new napi.DCtx();
  ctx.reset(napi.ResetDirective.sessionOnly);
  const out = ownBuffer(Math.max(0, need - skip));
  let produced = 0;
  let consumed = 0;
  try {
    while (produced < need && consumed < src.length) {
      if (produced > 0) await yieldToLoop();
      const into =
        produced < skip
          ? scratch.subarray(0, Math.min(ZSTD_STEP, skip - produced))
          : out.subarray(produced - skip, Math.min(need, produced + ZSTD_STEP) - skip);
      const r = ctx.decompressStream(into, src.subarray(consumed));
      produced += r[1];
      consumed += r[2];
      if (r[1] === 0 && r[2] === 0) break;
    }
  } finally {
    if (idle.length < MAX_IDLE) idle.push(ctx);
  }
  return out.subarray(0, Math.max(0, produced - skip));
}

/** Output buffer of a ZstdStreamDecoder: zstd's recommended streaming output size is 128 KiB. */
const STREAM_OUT = 128 * 1024;

/**
 * A whole zstd stream (concatenated frames, skippable ones included) decoded piece by piece with
 * one decoder context and one output buffer, reused: each run of output goes to `sink`
 * synchronously, which must be done with it when it returns. zstd-napi's DecompressStream
 * allocates a fresh 128 KiB buffer per output instead, one per frame at least: a zstd:chunked
 * layer's DiffID check (frames of ~54 KiB) then left ~1 GB of such buffers per 400 MB layer to the
 * collector, in malloc's heap (bench/README.md, session 18).
 */
export class ZstdStreamDecoder {
  private readonly ctx: DCtx;
  private readonly out = Buffer.allocUnsafeSlow(STREAM_OUT);
  private inFrame = false;

  constructor() {
    napi ??= createRequire(import.meta.url)('zstd-napi/binding') as ZstdNapi;
    this.ctx = new napi.DCtx();
  }

  /** Decode all of `src` (throws on corrupt data). */
  write(src: Buffer, sink: (data: Buffer) => void): void {
    let rest = src;
    for (;;) {
      const [ret, produced, consumed] = this.ctx.decompressStream(this.out, rest);
      if (produced > 0) sink(this.out.subarray(0, produced));
      rest = rest.subarray(consumed);
      this.inFrame = ret !== 0;
      // input used up, and the output did not fill (nothing more buffered) or the frame ended
      if (rest.length === 0 && (produced < this.out.length || ret === 0)) return;
      if (produced === 0 && consumed === 0) throw new Error('zstd decoder made no progress');
    }
  }

  /** True when the stream so far ends inside a frame (truncated, if nothing follows). */
  get midFrame(): boolean {
    return this.inFrame;
  }
}
