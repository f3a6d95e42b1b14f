import { StoreError } from '../../util/errors.js';
import {
  TYPE_BLOCK,
  TYPE_CHAR,
  TYPE_DIR,
  TYPE_FIFO,
  TYPE_LINK,
  TYPE_REG,
  TYPE_SYMLINK,
  type TarHeader,
  padding,
} from './tar-header.js';

/**
 * Streaming tar parser for the writers. We parse ourselves (rather than with tar-stream) because
 * the writers must keep PAX record values as raw bytes (binary xattrs such as security.capability
 * would be corrupted by a UTF-8 round trip) and need each payload's absolute offset in the stream.
 */

export interface TarEntry {
  header: TarHeader;
  /** Absolute offset of the payload in the (decompressed) tar stream. */
  dataOffset: number;
}

const BLOCK = 512;
/** Same bound as Go archive/tar for PAX / GNU long-name payloads. */
const MAX_SPECIAL = 1 << 20;
const HEADER_ONLY = new Set([TYPE_LINK, TYPE_SYMLINK, TYPE_CHAR, TYPE_BLOCK, TYPE_DIR, TYPE_FIFO]);
const utf8 = new TextDecoder('utf-8', { fatal: true });
/** 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z in Unix seconds. */
const MIN_MTIME = -62135596800;
const MAX_MTIME = 253402300799;

function bad(message: string, offset: number): StoreError {
  return new StoreError('E_BAD_ARCHIVE', `invalid tar: ${message}`, { offset });
}

/** Pulls exact byte counts out of an async chunk source, tracking the absolute position. */
class ByteReader {
  private readonly it: AsyncIterator<Buffer | Uint8Array | string>;
  private buf: Buffer = Buffer.alloc(0);
  position = 0;

  constructor(source: AsyncIterable<Buffer | Uint8Array | string>) {
    this.it = source[Symbol.asyncIterator]();
  }

  private async fill(): Promise<boolean> {
    const next = await this.it.next();
    if (next.done) return false;
    const v = next.value;
    const chunk = typeof v === 'string' ? Buffer.from(v) : Buffer.isBuffer(v) ? v : Buffer.from(v);
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    return true;
  }

  /** Exactly n bytes, or null at a clean end of input; a partial read is E_TRUNCATED. */
  async read(n: number): Promise<Buffer | null> {
    while (this.buf.length < n) {
      if (!(await this.fill())) {
        if (this.buf.length === 0) return null;
        throw new StoreError('E_TRUNCATED', 'tar stream ends inside a record', { offset: this.position });
      }
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    this.position += n;
    return out;
  }

  async skip(n: number): Promise<void> {
    let left = n;
    while (left > 0) {
      if (this.buf.length === 0 && !(await this.fill())) {
        throw new StoreError('E_TRUNCATED', 'tar stream ends inside an entry payload', {
          offset: this.position,
        });
      }
      const take = Math.min(left, this.buf.length);
      this.buf = this.buf.subarray(take);
      this.position += take;
      left -= take;
    }
  }

  /** Consume the rest of the input (so a tee/spool upstream sees everything). */
  async drain(): Promise<void> {
    this.buf = Buffer.alloc(0);
    while (!(await this.it.next()).done) {
      /* discard */
    }
  }
}

function cstring(b: Buffer): Buffer {
  const nul = b.indexOf(0);
  return nul < 0 ? b : b.subarray(0, nul);
}

function decodeName(b: Buffer, offset: number): string {
  try {
    return utf8.decode(cstring(b));
  } catch {
    throw bad('name is not valid UTF-8', offset);
  }
}

/** Go parseNumeric: base-256 when the high bit is set, else octal trimmed of spaces/NULs. */
function parseNumber(b: Buffer, offset: number): number {
  if (b.length > 0 && (b[0]! & 0x80) !== 0) {
    const neg = (b[0]! & 0x40) !== 0;
    let v = 0n;
    for (let i = 0; i < b.length; i++) {
      let byte = i === 0 ? b[i]! & 0x7f : b[i]!;
      if (neg) byte ^= i === 0 ? 0x7f : 0xff;
      v = (v << 8n) | BigInt(byte);
    }
    const n = neg ? -(v + 1n) : v;
    if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw bad('numeric field out of range', offset);
    }
    return Number(n);
  }
  const s = b.toString('latin1').replace(/^[ \0]+|[ \0]+$/g, '');
  if (s === '') return 0;
  if (!/^[0-7]+$/.test(s)) throw bad(`bad octal field ${JSON.stringify(s)}`, offset);
  const n = parseInt(s, 8);
  if (!Number.isSafeInteger(n)) throw bad('numeric field out of range', offset);
  return n;
}

function checksumOk(blk: Buffer, offset: number): boolean {
  const want = parseNumber(blk.subarray(148, 156), offset);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const c = i >= 148 && i < 156 ? 0x20 : blk[i]!;
    unsigned += c;
    signed += c > 127 ? c - 256 : c;
  }
  return want === unsigned || want === signed;
}

function parsePax(data: Buffer, offset: number): [string, Buffer][] {
  const out: [string, Buffer][] = [];
  let pos = 0;
  while (pos < data.length) {
    if (data[pos] === 0) break; // NUL padding after the last record
    const sp = data.indexOf(0x20, pos);
    if (sp < 0) throw bad('malformed PAX record', offset);
    const len = Number(data.toString('latin1', pos, sp));
    if (!Number.isSafeInteger(len) || len <= sp - pos + 1 || pos + len > data.length) {
      throw bad('malformed PAX record length', offset);
    }
    const rec = data.subarray(sp + 1, pos + len);
    if (rec[rec.length - 1] !== 0x0a) throw bad('PAX record not newline-terminated', offset);
    const eq = rec.indexOf(0x3d);
    if (eq <= 0) throw bad('PAX record without key', offset);
    let key: string;
    try {
      key = utf8.decode(rec.subarray(0, eq));
    } catch {
      throw bad('PAX key is not valid UTF-8', offset);
    }
    out.push([key, Buffer.from(rec.subarray(eq + 1, rec.length - 1))]);
    pos += len;
  }
  return out;
}

/** Merge PAX record lists: later keys replace earlier ones in place. */
function mergeRecords(base: [string, Buffer][], over: [string, Buffer][]): [string, Buffer][] {
  const map = new Map<string, Buffer>(base);
  for (const [k, v] of over) map.set(k, v);
  return [...map.entries()];
}

function paxDecimal(v: Buffer, key: string, offset: number): number {
  const s = v.toString('latin1');
  if (!/^-?\d+$/.test(s)) throw bad(`bad PAX ${key} ${JSON.stringify(s)}`, offset);
  const n = Number(s);
  if (!Number.isSafeInteger(n)) throw bad(`PAX ${key} out of range`, offset);
  return n;
}

/** PAX time "sec[.frac]" -> floor seconds + nanoseconds. */
export function parsePaxTime(s: string, offset = 0): { sec: number; nsec: number } {
  const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(s);
  if (!m) throw bad(`bad PAX time ${JSON.stringify(s)}`, offset);
  const whole = Number(m[2]);
  const frac = (m[3] ?? '').slice(0, 9).padEnd(9, '0');
  let nsec = Number(frac);
  let sec = m[1] === '-' ? -whole : whole;
  if (m[1] === '-' && nsec > 0) {
    sec -= 1;
    nsec = 1e9 - nsec;
  }
  if (!Number.isSafeInteger(sec)) throw bad('PAX time out of range', offset);
  return { sec, nsec };
}

/**
 * Parse a tar stream. Yields each real entry (PAX/GNU long-name headers applied, global PAX
 * records merged in). Stops at the end-of-archive marker, then drains the source. Throws
 * StoreError E_BAD_ARCHIVE / E_TRUNCATED / E_UNSUPPORTED_FORMAT on bad input.
 */
export async function* readTar(
  source: AsyncIterable<Buffer | Uint8Array | string>,
): AsyncGenerator<TarEntry> {
  const r = new ByteReader(source);
  let local: [string, Buffer][] | null = null;
  let global: [string, Buffer][] = [];
  let longName: string | null = null;
  let longLink: string | null = null;
  while (true) {
    const at = r.position;
    const blk = await r.read(BLOCK);
    if (blk === null) break; // EOF at a header boundary without the zero blocks: accepted like Go
    if (blk.every((b) => b === 0)) break;
    if (!checksumOk(blk, at)) throw bad('header checksum mismatch', at);
    const magic = blk.toString('latin1', 257, 263);
    const version = blk.toString('latin1', 263, 265);
    const ustar = magic === 'ustar\0' && version === '00';
    const gnu = magic === 'ustar ' && version === ' \0';
    let typeflag = String.fromCharCode(blk[156]!);
    let size = parseNumber(blk.subarray(124, 136), at);
    if (size < 0) throw bad('negative size', at);

    if (typeflag === 'x' || typeflag === 'g' || typeflag === 'L' || typeflag === 'K') {
      if (size > MAX_SPECIAL) throw bad(`special header too large (${size} bytes)`, at);
      const data = size === 0 ? Buffer.alloc(0) : await r.read(size);
      if (data === null)
        throw new StoreError('E_TRUNCATED', 'tar ends inside a header payload', { offset: at });
      await r.skip(padding(size));
      if (typeflag === 'x') local = mergeRecords(local ?? [], parsePax(data, at));
      else if (typeflag === 'g')
        global = mergeRecords(
          global,
          parsePax(data, at).filter(([k]) => k !== 'comment'),
        );
      else if (typeflag === 'L') longName = decodeName(data, at);
      else longLink = decodeName(data, at);
      continue;
    }

    let name = decodeName(blk.subarray(0, 100), at);
    if (ustar) {
      const prefix = decodeName(blk.subarray(345, 500), at);
      if (prefix !== '') name = prefix + '/' + name;
    }
    let linkname = decodeName(blk.subarray(157, 257), at);
    let uname = ustar || gnu ? decodeName(blk.subarray(265, 297), at) : '';
    let gname = ustar || gnu ? decodeName(blk.subarray(297, 329), at) : '';
    let uid = parseNumber(blk.subarray(108, 116), at);
    let gid = parseNumber(blk.subarray(116, 124), at);
    let mtime = parseNumber(blk.subarray(136, 148), at);
    let mtimeNsec = 0;
    const mode = parseNumber(blk.subarray(100, 108), at);
    const devmajor = ustar || gnu ? parseNumber(blk.subarray(329, 337), at) : 0;
    const devminor = ustar || gnu ? parseNumber(blk.subarray(337, 345), at) : 0;

    if (longName !== null) name = longName;
    if (longLink !== null) linkname = longLink;
    const pax = mergeRecords(global, local ?? []);
    local = null;
    longName = null;
    longLink = null;
    for (const [k, v] of pax) {
      switch (k) {
        case 'path':
          name = decodeName(v, at);
          break;
        case 'linkpath':
          linkname = decodeName(v, at);
          break;
        case 'uname':
          uname = decodeName(v, at);
          break;
        case 'gname':
          gname = decodeName(v, at);
          break;
        case 'uid':
          uid = paxDecimal(v, k, at);
          break;
        case 'gid':
          gid = paxDecimal(v, k, at);
          break;
        case 'size':
          size = paxDecimal(v, k, at);
          if (size < 0) throw bad('negative PAX size', at);
          break;
        case 'mtime': {
          const t = parsePaxTime(v.toString('latin1'), at);
          mtime = t.sec;
          mtimeNsec = t.nsec;
          break;
        }
        default:
          if (k.startsWith('GNU.sparse.')) {
            throw new StoreError('E_UNSUPPORTED_FORMAT', 'sparse tar entries are not supported', {
              offset: at,
              name,
            });
          }
      }
    }

    // Go maps TypeRegA ('\0') with a trailing slash to a directory; contiguous files are regular.
    if (typeflag === '\0') typeflag = name.endsWith('/') ? TYPE_DIR : TYPE_REG;
    else if (typeflag === '7') typeflag = TYPE_REG;
    if (typeflag !== TYPE_REG && !HEADER_ONLY.has(typeflag)) {
      throw new StoreError('E_UNSUPPORTED_FORMAT', `unsupported tar entry type ${JSON.stringify(typeflag)}`, {
        offset: at,
        path: name,
      });
    }
    if (name === '') throw bad('entry with an empty name', at);
    // TOC times are RFC 3339 with a 4-digit year; anything outside year 1..9999 is not a real mtime.
    if (mtime < MIN_MTIME || mtime > MAX_MTIME) throw bad(`mtime ${mtime} out of range`, at);
    if (HEADER_ONLY.has(typeflag)) size = 0;

    const header: TarHeader = {
      name,
      linkname,
      typeflag,
      mode,
      uid,
      gid,
      size,
      mtime,
      mtimeNsec,
      uname,
      gname,
      devmajor,
      devminor,
      pax,
    };
    const dataOffset = r.position;
    yield { header, dataOffset };
    if (size > 0) await r.skip(size + padding(size));
  }
  await r.drain();
}
