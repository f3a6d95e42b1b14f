import { StoreError } from '../../util/errors.js';

export const TOC_TAR_NAME = 'stargz.index.json';

/** Room for the tar header(s), padding and end-of-archive blocks around the JSON. */
export const TAR_OVERHEAD = 64 * 1024;

/** Tar headers (PAX included) of the TOC entry are expected within this much output. */
export const HEAD_BYTES = 1024 * 1024;

/** The TOC tar entry must be `stargz.index.json` and its JSON within the size cap. */
export function checkTocEntry(name: string, size: number, maxTocBytes: number): void {
  if (name !== TOC_TAR_NAME) {
    throw new StoreError('E_BAD_TOC', `TOC tar entry is named ${JSON.stringify(name)}, not ${TOC_TAR_NAME}`);
  }
  if (size > maxTocBytes) {
    throw new StoreError('E_TOC_TOO_LARGE', `TOC JSON is ${size} bytes (limit ${maxTocBytes})`, {
      limit: maxTocBytes,
    });
  }
}

const BLOCK = 512;

function cString(buf: Buffer): string {
  const nul = buf.indexOf(0);
  return buf.subarray(0, nul < 0 ? buf.length : nul).toString('utf8');
}

/** Numeric tar field: octal text (NUL/space padded) or GNU base-256. */
function tarNumber(field: Buffer): number {
  if (field.length > 0 && (field[0]! & 0x80) !== 0) {
    if ((field[0]! & 0x40) !== 0) throw new StoreError('E_BAD_TOC', 'negative number in TOC tar header');
    let value = BigInt(field[0]! & 0x7f);
    for (let i = 1; i < field.length; i++) value = (value << 8n) | BigInt(field[i]!);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new StoreError('E_BAD_TOC', 'tar number out of range');
    return Number(value);
  }
  const text = field
    .toString('latin1')
    .replace(/[\0 ]+$/, '')
    .replace(/^ +/, '');
  if (text === '') return 0;
  if (!/^[0-7]+$/.test(text)) throw new StoreError('E_BAD_TOC', 'invalid octal number in TOC tar header');
  const value = parseInt(text, 8);
  if (!Number.isSafeInteger(value)) throw new StoreError('E_BAD_TOC', 'tar number out of range');
  return value;
}

function checkHeaderSum(header: Buffer): void {
  const want = tarNumber(header.subarray(148, 156));
  let unsigned = 0;
  for (let i = 0; i < BLOCK; i++) unsigned += i >= 148 && i < 156 ? 0x20 : header[i]!;
  // Some historic writers summed signed bytes; accept both like Go does.
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) signed += i >= 148 && i < 156 ? 0x20 : (header[i]! << 24) >> 24;
  if (want !== unsigned && want !== signed)
    throw new StoreError('E_BAD_TOC', 'TOC tar header checksum mismatch');
}

/** Parse PAX records (`"<len> key=value\n"`), returning path/size overrides. */
function paxRecords(data: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let pos = 0;
  while (pos < data.length) {
    const space = data.indexOf(0x20, pos);
    if (space < 0) throw new StoreError('E_BAD_TOC', 'malformed PAX record in TOC tar');
    const len = Number(data.subarray(pos, space).toString('latin1'));
    if (
      !Number.isSafeInteger(len) ||
      len <= space - pos ||
      pos + len > data.length ||
      data[pos + len - 1] !== 0x0a
    ) {
      throw new StoreError('E_BAD_TOC', 'malformed PAX record in TOC tar');
    }
    const record = data.subarray(space + 1, pos + len - 1).toString('utf8');
    const eq = record.indexOf('=');
    if (eq < 0) throw new StoreError('E_BAD_TOC', 'malformed PAX record in TOC tar');
    out.set(record.slice(0, eq), record.slice(eq + 1));
    pos += len;
  }
  return out;
}

/**
 * Name, body offset and body size of the first regular entry of a tar stream (PAX 'x' headers
 * applied), or undefined while `tar` (a prefix of the stream) is too short to tell. Needs only
 * the headers: the body may still be to come.
 */
export function findTarEntry(tar: Buffer): { name: string; start: number; size: number } | undefined {
  let pos = 0;
  let pax: Map<string, string> | undefined;
  for (let guard = 0; guard < 8; guard++) {
    if (pos + BLOCK > tar.length) return undefined;
    const header = tar.subarray(pos, pos + BLOCK);
    if (header.every((b) => b === 0)) throw new StoreError('E_BAD_TOC', 'TOC tar stream has no entry');
    checkHeaderSum(header);
    const typeflag = String.fromCharCode(header[156]!);
    let size = tarNumber(header.subarray(124, 136));
    const magic = header.subarray(257, 263).toString('latin1');
    let name = cString(header.subarray(0, 100));
    if (magic === 'ustar\0') {
      const prefix = cString(header.subarray(345, 500));
      if (prefix !== '') name = `${prefix}/${name}`;
    }
    const dataStart = pos + BLOCK;
    if (typeflag === 'x') {
      if (dataStart + size > tar.length) return undefined;
      pax = paxRecords(tar.subarray(dataStart, dataStart + size));
      pos = dataStart + Math.ceil(size / BLOCK) * BLOCK;
      continue;
    }
    if (typeflag !== '0' && typeflag !== '\0') {
      throw new StoreError(
        'E_BAD_TOC',
        `TOC tar entry has type ${JSON.stringify(typeflag)}, not a regular file`,
      );
    }
    if (pax?.has('path')) name = pax.get('path')!;
    if (pax?.has('size')) {
      const paxSize = Number(pax.get('size'));
      if (!Number.isSafeInteger(paxSize) || paxSize < 0) throw new StoreError('E_BAD_TOC', 'bad PAX size');
      size = paxSize;
    }
    return { name, start: dataStart, size };
  }
  throw new StoreError('E_BAD_TOC', 'too many extended headers before the TOC entry');
}
