import { goQuote } from './go-json.js';

/**
 * tar-split metadata (github.com/vbatts/tar-split storage format) as embedded by current
 * containers/storage zstd:chunked: JSON lines, one per entry, in stream order:
 *   {"type":2,"payload":"<base64 raw bytes>","position":N}                 raw segment (padding of
 *      the previous payload + this entry's header blocks; the last one holds the tar EOF blocks)
 *   {"type":1,"name":"<path>","size":N,"payload":"<base64 crc64>","position":N}   file entry
 * The file payload is the 8-byte big-endian CRC-64/ISO (Go hash/crc64 ISO table) of the content,
 * `null` for empty entries; `size` is omitted when 0 (Go omitempty). Positions count from 0.
 * c/storage only reads this during partial pulls (to rebuild the exact tar); our reader ignores it.
 */

// CRC-64/GO-ISO: reflected polynomial 0xD800000000000000, init and xorout all ones. The 64-bit
// state is kept as two uint32 halves (JS bit operations are 32-bit) and eight tables let the
// loop consume 8 bytes per step ("slicing-by-8").
const HI: Uint32Array[] = [];
const LO: Uint32Array[] = [];
{
  const hi0 = new Uint32Array(256);
  const lo0 = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let hi = 0;
    let lo = i;
    for (let k = 0; k < 8; k++) {
      const lsb = lo & 1;
      lo = ((lo >>> 1) | ((hi & 1) << 31)) >>> 0;
      hi = hi >>> 1;
      if (lsb) hi = (hi ^ 0xd8000000) >>> 0;
    }
    hi0[i] = hi;
    lo0[i] = lo;
  }
  HI.push(hi0);
  LO.push(lo0);
  for (let t = 1; t < 8; t++) {
    const ph = HI[t - 1]!;
    const pl = LO[t - 1]!;
    const h = new Uint32Array(256);
    const l = new Uint32Array(256);
    for (let i = 0; i < 256; i++) {
      // T[t][i] = (T[t-1][i] >> 8) ^ T[0][T[t-1][i] & 0xff]
      const idx = pl[i]! & 0xff;
      l[i] = (((pl[i]! >>> 8) | (ph[i]! << 24)) ^ lo0[idx]!) >>> 0;
      h[i] = ((ph[i]! >>> 8) ^ hi0[idx]!) >>> 0;
    }
    HI.push(h);
    LO.push(l);
  }
}
const [H0, H1, H2, H3, H4, H5, H6, H7] = HI as [
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
];
const [L0, L1, L2, L3, L4, L5, L6, L7] = LO as [
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
];

export class Crc64Iso {
  private hi = 0xffffffff;
  private lo = 0xffffffff;

  update(buf: Uint8Array): this {
    let hi = this.hi;
    let lo = this.lo;
    let i = 0;
    const n8 = buf.length - (buf.length % 8);
    for (; i < n8; i += 8) {
      const a = lo ^ (buf[i]! | (buf[i + 1]! << 8) | (buf[i + 2]! << 16) | (buf[i + 3]! << 24));
      const b = hi ^ (buf[i + 4]! | (buf[i + 5]! << 8) | (buf[i + 6]! << 16) | (buf[i + 7]! << 24));
      lo =
        L7[a & 0xff]! ^
        L6[(a >>> 8) & 0xff]! ^
        L5[(a >>> 16) & 0xff]! ^
        L4[a >>> 24]! ^
        L3[b & 0xff]! ^
        L2[(b >>> 8) & 0xff]! ^
        L1[(b >>> 16) & 0xff]! ^
        L0[b >>> 24]!;
      hi =
        H7[a & 0xff]! ^
        H6[(a >>> 8) & 0xff]! ^
        H5[(a >>> 16) & 0xff]! ^
        H4[a >>> 24]! ^
        H3[b & 0xff]! ^
        H2[(b >>> 8) & 0xff]! ^
        H1[(b >>> 16) & 0xff]! ^
        H0[b >>> 24]!;
    }
    for (; i < buf.length; i++) {
      const idx = (lo ^ buf[i]!) & 0xff;
      lo = ((lo >>> 8) | (hi << 24)) ^ L0[idx]!;
      hi = (hi >>> 8) ^ H0[idx]!;
    }
    this.hi = hi >>> 0;
    this.lo = lo >>> 0;
    return this;
  }

  /** Big-endian 8 bytes, like Go's hash.Hash64.Sum(nil). */
  digest(): Buffer {
    const out = Buffer.alloc(8);
    out.writeUInt32BE(~this.hi >>> 0, 0);
    out.writeUInt32BE(~this.lo >>> 0, 4);
    return out;
  }
}

export class TarSplitBuilder {
  private readonly lines: string[] = [];
  private position = 0;
  private pending: Buffer[] = [];

  /** Raw bytes (headers, padding, EOF) accumulate until the next file entry or the end. */
  raw(bytes: Buffer): void {
    if (bytes.length > 0) this.pending.push(bytes);
  }

  private flushRaw(): void {
    if (this.pending.length === 0) return;
    const payload = Buffer.concat(this.pending).toString('base64');
    this.pending = [];
    this.lines.push(`{"type":2,"payload":"${payload}","position":${this.position++}}\n`);
  }

  file(name: string, size: number, crc: Buffer | null): void {
    this.flushRaw();
    const sizePart = size > 0 ? `,"size":${size}` : '';
    const payload = crc === null ? 'null' : `"${crc.toString('base64')}"`;
    this.lines.push(
      `{"type":1,"name":${goQuote(name)}${sizePart},"payload":${payload},"position":${this.position++}}\n`,
    );
  }

  finish(): Buffer {
    this.flushRaw();
    return Buffer.from(this.lines.join(''), 'utf8');
  }
}
