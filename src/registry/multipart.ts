import { StoreError } from '../util/errors.js';
import { parseContentRange, type ContentRange } from './byte-ranges.js';

export interface BytePart extends ContentRange {
  data: Buffer;
}

/** The boundary of a `multipart/byteranges; boundary=...` Content-Type, or undefined for other types. */
export function multipartBoundary(contentType: string | string[] | undefined): string | undefined {
  const ct = Array.isArray(contentType) ? contentType[0] : contentType;
  if (!ct || !/^\s*multipart\/byteranges\s*(;|$)/i.test(ct)) return undefined;
  const m = /;\s*boundary\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))/i.exec(ct);
  const b = m ? (m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2]) : undefined;
  if (!b || b.length > 200) {
    throw new StoreError('E_REGISTRY_PROTOCOL', 'multipart/byteranges response without a usable boundary');
  }
  return b;
}

function protocol(msg: string, at: number): StoreError {
  return new StoreError('E_REGISTRY_PROTOCOL', `malformed multipart/byteranges body: ${msg}`, { at });
}

function lineEnd(buf: Buffer, from: number): { end: number; next: number } | undefined {
  const lf = buf.indexOf(0x0a, from);
  if (lf < 0) return undefined;
  const end = lf > from && buf[lf - 1] === 0x0d ? lf - 1 : lf;
  return { end, next: lf + 1 };
}

/**
 * Parse a buffered `multipart/byteranges` body (RFC 9110 §14.6). Each part's length is taken
 * from its Content-Range, not from scanning for the boundary, so binary data that happens to
 * contain the boundary cannot split a part. Tolerates a preamble, bare-LF line ends and
 * missing epilogue, rejects anything that does not add up.
 */
export function parseMultipartByteranges(body: Buffer, boundary: string): BytePart[] {
  const delim = Buffer.from(`--${boundary}`, 'latin1');
  const parts: BytePart[] = [];
  let pos = body.indexOf(delim);
  if (pos < 0) throw protocol('no boundary', 0);
  while (true) {
    pos += delim.length;
    // closing delimiter
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) return finish(parts);
    // rest of the delimiter line (transport padding allowed)
    const dl = lineEnd(body, pos);
    if (!dl || body.subarray(pos, dl.end).toString('latin1').trim() !== '')
      throw protocol('bad delimiter line', pos);
    pos = dl.next;
    // headers until an empty line
    let range: ContentRange | undefined;
    while (true) {
      const l = lineEnd(body, pos);
      if (!l) throw protocol('unterminated part headers', pos);
      const line = body.subarray(pos, l.end).toString('latin1');
      pos = l.next;
      if (line === '') break;
      const colon = line.indexOf(':');
      if (colon <= 0) throw protocol('bad header line', pos);
      if (line.slice(0, colon).trim().toLowerCase() === 'content-range') {
        range = parseContentRange(line.slice(colon + 1).trim());
      }
    }
    if (!range) throw protocol('part without Content-Range', pos);
    const len = range.end - range.start + 1;
    if (pos + len > body.length) {
      throw new StoreError('E_TRUNCATED', 'multipart/byteranges body ends inside a part', {
        at: pos,
        expected: len,
      });
    }
    parts.push({ ...range, data: body.subarray(pos, pos + len) });
    pos += len;
    // CRLF (or LF) then the next delimiter
    if (body[pos] === 0x0d) pos++;
    if (body[pos] === 0x0a) pos++;
    else if (pos < body.length) throw protocol('part data longer than its Content-Range', pos);
    if (pos >= body.length) {
      throw new StoreError('E_TRUNCATED', 'multipart/byteranges body ends without a closing delimiter', {
        at: pos,
      });
    }
    if (!body.subarray(pos, pos + delim.length).equals(delim))
      throw protocol('part data longer than its Content-Range', pos);
  }
}

function finish(parts: BytePart[]): BytePart[] {
  if (parts.length === 0) throw protocol('no parts', 0);
  const total = parts[0]!.total;
  if (parts.some((p) => p.total !== total)) throw protocol('parts disagree on the total size', 0);
  return parts;
}
