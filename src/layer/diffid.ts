import { createHash, type Hash } from 'node:crypto';
import type { Transform } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { StoreError } from '../util/errors.js';
import { gcPacer } from '../util/gc-pacer.js';
import { releaseBuffer } from '../util/release-buffer.js';
import { ZstdStreamDecoder } from '../format/codec-inflate.js';
import type { Compression } from '../format/model.js';

/**
 * Pieces handed to the decompressor. gzip inflates on libuv's thread pool, so only the sha256 of
 * the output runs here; zstd decodes synchronously on this thread (ZstdStreamDecoder), so its pieces are smaller
 * to keep each event-loop turn short (the FUSE server shares this thread). Node's own zstd stream
 * (Node >= 23.8) would run on the pool, but it stops at the end of the first frame of a write and
 * outputs nothing after a leading skippable frame (measured on Node 24.21): not usable here.
 */
const PIECE: Record<Compression, number> = { gzip: 256 * 1024, zstd: 64 * 1024 };

/** gunzip's output buffer: it emits each one in views, in order, then takes a fresh one. */
const GZIP_OUT = 256 * 1024;

export interface StreamDigestResult {
  /** sha256 of the decompressed stream. */
  digest: string;
  size: number;
  /**
   * zstd only: sha256 of the stream followed by 512..10240 zero bytes (`bytes`). Podman 4.3's
   * zstd:chunked writer drops the zero padding after the tar's end-of-archive blocks while the
   * image config keeps the original tar's diff_id (seen on the lab's Debian base layer: the stream
   * is the original tar minus its last 1024 zero bytes). Zeros after the end of the archive hold no
   * file content, so a match with one of these is still a full verification of every byte served.
   */
  padded?: Array<{ digest: string; bytes: number }>;
}

/** The tar block and record sizes: padding after the end-of-archive blocks is whole blocks, up to one record. */
const TAR_BLOCK = 512;
const TAR_RECORD = 10240;

function paddedDigests(hash: Hash): Array<{ digest: string; bytes: number }> {
  const out: Array<{ digest: string; bytes: number }> = [];
  const block = Buffer.alloc(TAR_BLOCK);
  const h = hash.copy();
  for (let bytes = TAR_BLOCK; bytes <= TAR_RECORD; bytes += TAR_BLOCK) {
    h.update(block);
    out.push({ digest: 'sha256:' + h.copy().digest('hex'), bytes });
  }
  return out;
}

/**
 * sha256 of the decompressed stream of a layer's compressed bytes, fed in order, without a worker
 * thread (a DiffID worker cost 35-40 MiB of RSS; this costs the decompressor's window).
 * `write` resolves once the piece was consumed (backpressure), `beforePiece` runs before each
 * piece (the caller pauses for on-demand work there).
 * gzip: Node's gunzip continues across concatenated members. zstd: skippable frames (TOC,
 * tar-split, footer) produce no output, so the digest is over the data frames only.
 */
export class StreamDigest {
  /** gzip: Node's gunzip on the thread pool. */
  private dec: Transform | undefined;
  /** zstd: decoded here, synchronously, into one reused buffer (format/codec-inflate.ts). */
  private zdec: ZstdStreamDecoder | undefined;
  private readonly hash = createHash('sha256');
  private size = 0;
  private failure: StoreError | undefined;
  private finished: Promise<void> | undefined;
  private destroyed = false;
  /** Rejects the piece being written: a decompressor that failed may never call its callback. */
  private rejectPiece: ((e: StoreError) => void) | undefined;

  constructor(private readonly compression: Compression) {}

  private start(): Transform {
    if (this.dec !== undefined) return this.dec;
    if (this.destroyed) throw new StoreError('E_ABORTED', 'diffid stream already closed');
    const dec = createGunzip({ chunkSize: GZIP_OUT });
    dec.on('data', (d: Buffer) => {
      this.hash.update(d);
      this.size += d.length;
      gcPacer.note(d.length);
      // The view that ends its output buffer is the buffer's last one (zlib takes a fresh buffer
      // once one is full, and views arrive in order): hashed, the buffer is dead and goes back now
      // (a 400 MB layer's check makes ~1,600 of them). Without credit to the pacer: the pass's
      // other garbage (unit spans, chunk decodes) is still collected at the pace this stream sets.
      // Layers mounted (bench/mounted-layers.sh, same run): peak 148-150 MB against 154-161 before;
      // with the credit 177-178 against 160-161, collections coming later (bench/README session 20).
      if (d.byteOffset + d.length === GZIP_OUT && d.buffer.byteLength === GZIP_OUT) {
        releaseBuffer(Buffer.from(d.buffer), { counted: false });
      }
    });
    this.finished = new Promise<void>((resolve, reject) => {
      dec.on('end', resolve);
      dec.on('error', (e: Error) => {
        this.failure ??= new StoreError('E_DECOMPRESS', `layer stream does not decompress: ${e.message}`);
        reject(this.failure);
        this.rejectPiece?.(this.failure);
      });
    });
    this.finished.catch(() => undefined);
    this.dec = dec;
    return dec;
  }

  /** Resolves once the decompressor is done with `buf` (it may be reused or released then). */
  async write(buf: Buffer, beforePiece?: () => Promise<void>): Promise<void> {
    const step = PIECE[this.compression];
    for (let off = 0; off < buf.length; off += step) {
      if (beforePiece !== undefined) await beforePiece();
      if (this.failure !== undefined) throw this.failure;
      const piece = buf.subarray(off, Math.min(buf.length, off + step));
      if (this.compression === 'zstd') this.writeZstd(piece);
      else await this.writePiece(this.start(), piece);
    }
  }

  private writeZstd(piece: Buffer): void {
    if (this.destroyed) throw new StoreError('E_ABORTED', 'diffid stream already closed');
    this.zdec ??= new ZstdStreamDecoder();
    try {
      this.zdec.write(piece, (d) => {
        this.hash.update(d);
        this.size += d.length;
      });
      // no garbage is made here any more, but the pass's own (unit spans, decoded chunks) is
      // still collected at the pace the decoded stream used to set: the pacing measured
      // (bench/README.md session 18), not tuned anew
      gcPacer.note(piece.length);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.failure ??= new StoreError('E_DECOMPRESS', `layer stream does not decompress: ${message}`);
      throw this.failure;
    }
  }

  private writePiece(dec: Transform, piece: Buffer): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      // no race against `finished` per piece: that would add a reaction to one long-lived
      // promise for every piece written (tens of thousands per GiB)
      this.rejectPiece = reject;
      dec.write(piece, (err) => {
        this.rejectPiece = undefined;
        if (err !== null && err !== undefined) {
          this.failure ??= new StoreError('E_DECOMPRESS', `layer stream does not decompress: ${err.message}`);
          reject(this.failure);
        } else resolve();
      });
    });
  }

  async end(): Promise<StreamDigestResult> {
    if (this.failure !== undefined) throw this.failure;
    if (this.compression === 'zstd') {
      if (this.zdec?.midFrame === true) {
        this.failure = new StoreError(
          'E_DECOMPRESS',
          'layer stream does not decompress: it ends in the middle of a zstd frame',
        );
        throw this.failure;
      }
    } else {
      const dec = this.start();
      dec.end();
      await this.finished;
    }
    if (this.failure !== undefined) throw this.failure;
    const padded = this.compression === 'zstd' ? paddedDigests(this.hash) : undefined;
    const out: StreamDigestResult = { digest: 'sha256:' + this.hash.digest('hex'), size: this.size };
    if (padded !== undefined) out.padded = padded;
    return out;
  }

  async destroy(): Promise<void> {
    this.destroyed = true;
    this.dec?.destroy();
  }
}
