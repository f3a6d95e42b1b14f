import { posix } from 'node:path';

/**
 * One tar entry's metadata as the writers see it (after PAX / GNU long-name processing), plus the
 * raw PAX records so nothing the input carried (xattrs, atime, vendor keys) is lost on re-encode.
 */
export interface TarHeader {
  name: string;
  linkname: string;
  /** Typeflag character: '0' reg, '1' hardlink, '2' symlink, '3' char, '4' block, '5' dir, '6' fifo. */
  typeflag: string;
  /** Raw mode field (may or may not carry S_IFMT type bits, as the input had it). */
  mode: number;
  uid: number;
  gid: number;
  /** Payload length (0 for header-only types). */
  size: number;
  /** Whole seconds since the epoch (floor), and the sub-second part in nanoseconds. */
  mtime: number;
  mtimeNsec: number;
  uname: string;
  gname: string;
  devmajor: number;
  devminor: number;
  /** PAX records as read (global records merged in), values raw; keys unique, original order. */
  pax: [string, Buffer][];
}

export const TYPE_REG = '0';
export const TYPE_LINK = '1';
export const TYPE_SYMLINK = '2';
export const TYPE_CHAR = '3';
export const TYPE_BLOCK = '4';
export const TYPE_DIR = '5';
export const TYPE_FIFO = '6';

export type TocType = 'reg' | 'hardlink' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo';

const TOC_TYPES: Record<string, TocType> = {
  [TYPE_REG]: 'reg',
  [TYPE_LINK]: 'hardlink',
  [TYPE_SYMLINK]: 'symlink',
  [TYPE_CHAR]: 'char',
  [TYPE_BLOCK]: 'block',
  [TYPE_DIR]: 'dir',
  [TYPE_FIFO]: 'fifo',
};

export function tocType(typeflag: string): TocType | undefined {
  return TOC_TYPES[typeflag];
}

/** S_IFMT bits per type, as containers/storage records `mode` (hardlinks count as regular files). */
const IFMT: Record<TocType, number> = {
  reg: 0o100000,
  hardlink: 0o100000,
  symlink: 0o120000,
  char: 0o020000,
  block: 0o060000,
  dir: 0o040000,
  fifo: 0o010000,
};

export function statMode(h: TarHeader): number {
  const t = tocType(h.typeflag) ?? 'reg';
  return (h.mode & 0o7777) | IFMT[t];
}

export const XATTR_PREFIX = 'SCHILY.xattr.';

/** Extended attributes carried as `SCHILY.xattr.<name>` PAX records. */
export function xattrsOf(h: TarHeader): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (const [k, v] of h.pax) if (k.startsWith(XATTR_PREFIX)) out.set(k.slice(XATTR_PREFIX.length), v);
  return out;
}

export function paxRecord(h: TarHeader, key: string): Buffer | undefined {
  for (const [k, v] of h.pax) if (k === key) return v;
  return undefined;
}

/** Cleaned archive path: '/' + name, lexically cleaned, leading '/' removed ('' = root). */
export function cleanName(name: string): string {
  return posix
    .normalize('/' + name)
    .replace(/^\/+/, '')
    .replace(/\/+$/, '');
}

// ---------------------------------------------------------------------------------------------
// Encoding. Mirrors Go archive/tar's USTAR/PAX writer (field formatting, PaxHeaders.0 naming,
// sorted PAX records) so output is conventional and stable; byte equality with Go is a bonus.

const BLOCK = 512;
/** PAX keys that describe header fields; they are regenerated, never copied from the input. */
const BASIC_KEYS = new Set(['path', 'linkpath', 'size', 'uid', 'gid', 'uname', 'gname', 'mtime']);

function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) >= 0x80) return false;
  return true;
}

function toAscii(s: string): string {
  let out = '';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (c < 0x80 && c !== 0) out += ch;
  }
  return out;
}

function fitsOctal(x: number, fieldLen: number): boolean {
  return Number.isSafeInteger(x) && x >= 0 && x < 8 ** (fieldLen - 1);
}

function putString(blk: Buffer, off: number, len: number, s: string): void {
  const b = Buffer.from(s, 'latin1');
  b.copy(blk, off, 0, Math.min(len, b.length));
}

/** Octal with a NUL terminator (Go formatOctal); base-256 when it does not fit (GNU extension). */
function putNumber(blk: Buffer, off: number, len: number, x: number): void {
  if (fitsOctal(x, len)) {
    putString(blk, off, len, x.toString(8).padStart(len - 1, '0'));
    return;
  }
  let v = BigInt(x);
  const neg = v < 0n;
  for (let i = len - 1; i >= 1; i--) {
    blk[off + i] = Number(v & 0xffn);
    v >>= 8n;
  }
  blk[off] = neg ? 0xff : 0x80;
}

function finishBlock(blk: Buffer): Buffer {
  blk.write('ustar\x0000', 257, 'latin1');
  blk.fill(0x20, 148, 156);
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += blk[i]!;
  putString(blk, 148, 7, sum.toString(8).padStart(6, '0'));
  blk[154] = 0;
  blk[155] = 0x20;
  return blk;
}

export function formatPaxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`, 'utf8'), value, Buffer.from('\n')]);
  let size = body.length + String(body.length).length;
  if (String(size).length + body.length !== size) size = String(size).length + body.length;
  return Buffer.concat([Buffer.from(String(size)), body]);
}

function splitUstarPath(name: string): [string, string] | undefined {
  let length = name.length;
  if (length <= 100 || !isAscii(name)) return undefined;
  if (length > 156) length = 156;
  else if (name[length - 1] === '/') length--;
  const i = name.lastIndexOf('/', length - 1);
  const nlen = name.length - i - 1;
  if (i <= 0 || nlen > 100 || nlen === 0 || i > 155) return undefined;
  return [name.slice(0, i), name.slice(i + 1)];
}

export function padding(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

/** Go's `path.Join(dir, "PaxHeaders.0", file)` for the extended header's own name. */
function paxHeaderName(name: string): string {
  const slash = name.lastIndexOf('/');
  const dir = name.slice(0, slash + 1);
  const file = name.slice(slash + 1);
  let n = toAscii(posix.join(dir === '' ? '.' : dir, 'PaxHeaders.0', file));
  if (n.length > 100) n = n.slice(0, 100);
  return n.replace(/\/+$/, '');
}

/**
 * Tar header bytes for `h`: an optional PAX extended header (+ its records, padded) followed by the
 * USTAR header block. Fields that USTAR cannot hold (long or non-ASCII names, big ids/sizes,
 * fractional mtimes) go to PAX records; every non-basic input PAX record is preserved.
 */
export function encodeHeader(h: TarHeader): Buffer {
  const records = new Map<string, Buffer>();
  for (const [k, v] of h.pax) {
    if (!BASIC_KEYS.has(k) && !k.startsWith('GNU.sparse.')) records.set(k, v);
  }
  let name = h.name;
  let prefix = '';
  if (!isAscii(h.name) || h.name.length > 100) {
    const split = splitUstarPath(h.name);
    if (split) [prefix, name] = split;
    else records.set('path', Buffer.from(h.name, 'utf8'));
  }
  if (!isAscii(h.linkname) || h.linkname.length > 100)
    records.set('linkpath', Buffer.from(h.linkname, 'utf8'));
  if (!isAscii(h.uname) || h.uname.length > 32) records.set('uname', Buffer.from(h.uname, 'utf8'));
  if (!isAscii(h.gname) || h.gname.length > 32) records.set('gname', Buffer.from(h.gname, 'utf8'));
  if (!fitsOctal(h.uid, 8)) records.set('uid', Buffer.from(String(h.uid)));
  if (!fitsOctal(h.gid, 8)) records.set('gid', Buffer.from(String(h.gid)));
  if (!fitsOctal(h.size, 12)) records.set('size', Buffer.from(String(h.size)));
  if (!fitsOctal(h.mtime, 12) || h.mtimeNsec !== 0) {
    const input = paxRecord(h, 'mtime');
    records.set('mtime', input ?? Buffer.from(String(h.mtime)));
  }

  const out: Buffer[] = [];
  if (records.size > 0) {
    const keys = [...records.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    const data = Buffer.concat(keys.map((k) => formatPaxRecord(k, records.get(k)!)));
    const ext = Buffer.alloc(BLOCK);
    putString(ext, 0, 100, paxHeaderName(h.name));
    putNumber(ext, 100, 8, 0);
    putNumber(ext, 108, 8, 0);
    putNumber(ext, 116, 8, 0);
    putNumber(ext, 124, 12, data.length);
    putNumber(ext, 136, 12, 0);
    ext[156] = 0x78; // 'x'
    out.push(finishBlock(ext), data, Buffer.alloc(padding(data.length)));
  }

  const blk = Buffer.alloc(BLOCK);
  putString(blk, 0, 100, toAscii(name));
  putNumber(blk, 100, 8, h.mode);
  putNumber(blk, 108, 8, fitsOctal(h.uid, 8) ? h.uid : 0);
  putNumber(blk, 116, 8, fitsOctal(h.gid, 8) ? h.gid : 0);
  putNumber(blk, 124, 12, fitsOctal(h.size, 12) ? h.size : 0);
  putNumber(blk, 136, 12, fitsOctal(h.mtime, 12) ? h.mtime : 0);
  blk[156] = h.typeflag.charCodeAt(0);
  putString(blk, 157, 100, toAscii(h.linkname));
  putString(blk, 265, 32, toAscii(h.uname));
  putString(blk, 297, 32, toAscii(h.gname));
  putNumber(blk, 329, 8, h.devmajor);
  putNumber(blk, 337, 8, h.devminor);
  if (prefix !== '') putString(blk, 345, 155, prefix);
  out.push(finishBlock(blk));
  return out.length === 1 ? out[0]! : Buffer.concat(out);
}

/** A plain regular-file header with everything else zero (landmarks, stargz.index.json). */
export function simpleFileHeader(name: string, size: number): TarHeader {
  return {
    name,
    linkname: '',
    typeflag: TYPE_REG,
    mode: 0,
    uid: 0,
    gid: 0,
    size,
    mtime: 0,
    mtimeNsec: 0,
    uname: '',
    gname: '',
    devmajor: 0,
    devminor: 0,
    pax: [],
  };
}
