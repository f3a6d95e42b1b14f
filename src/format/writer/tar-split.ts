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
/**
 * The 8 slicing tables of both 32-bit halves in one array: entry (k, byte) of table k is at
 * 2 * (256 * k + byte) for the low word and the next index for the high word, so each of the 8
 * lookups of a step computes its index once for both halves.
 */
const T = new Uint32Array(8 * 256 * 2);
for (let k = 0; k < 8; k++) {
  for (let i = 0; i < 256; i++) {
    T[2 * (256 * k + i)] = LO[k]![i]!;
    T[2 * (256 * k + i) + 1] = HI[k]![i]!;
  }
}
const L0 = LO[0]!;
const H0 = HI[0]!;

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
      // byte j of the 8 (a's low byte first) looks up table 7 - j
      const p7 = 2 * (256 * 7 + (a & 0xff));
      const p6 = 2 * (256 * 6 + ((a >>> 8) & 0xff));
      const p5 = 2 * (256 * 5 + ((a >>> 16) & 0xff));
      const p4 = 2 * (256 * 4 + (a >>> 24));
      const p3 = 2 * (256 * 3 + (b & 0xff));
      const p2 = 2 * (256 * 2 + ((b >>> 8) & 0xff));
      const p1 = 2 * (256 + ((b >>> 16) & 0xff));
      const p0 = 2 * (b >>> 24);
      lo = T[p7]! ^ T[p6]! ^ T[p5]! ^ T[p4]! ^ T[p3]! ^ T[p2]! ^ T[p1]! ^ T[p0]!;
      hi =
        T[p7 + 1]! ^ T[p6 + 1]! ^ T[p5 + 1]! ^ T[p4 + 1]! ^ T[p3 + 1]! ^ T[p2 + 1]! ^ T[p1 + 1]! ^ T[p0 + 1]!;
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
