import { readFile } from 'node:fs/promises';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { coalesce, parseContentRange, rangeHeader } from '../../src/registry/byte-ranges.js';
import { multipartBoundary, parseMultipartByteranges } from '../../src/registry/multipart.js';
import { isStoreError } from '../../src/util/errors.js';
import { SHARED } from '../helpers/shared.js';

function code(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    return isStoreError(e) ? e.code : 'not-a-store-error';
  }
  return undefined;
}

/** Build a body the way Go's net/http does (first delimiter without leading CRLF). */
function goMultipart(
  boundary: string,
  parts: Array<{ start: number; data: Buffer; total: number }>,
  crlf = '\r\n',
): Buffer {
  const out: Buffer[] = [];
  parts.forEach((p, i) => {
    out.push(
      Buffer.from(
        `${i ? crlf : ''}--${boundary}${crlf}Content-Range: bytes ${p.start}-${p.start + p.data.length - 1}/${p.total}${crlf}Content-Type: application/octet-stream${crlf}${crlf}`,
      ),
    );
    out.push(p.data);
  });
  out.push(Buffer.from(`${crlf}--${boundary}--${crlf}`));
  return Buffer.concat(out);
}

describe('multipart/byteranges parser', () => {
  it('parses the docker-registry transcript in lab/range-test.txt', async () => {
    // the transcript holds the wire bytes (CRLF); the body is the Content-Length bytes after the headers
    const text = await readFile(`${SHARED}/lab/range-test.txt`, 'latin1');
    const section = text.split('### Range: bytes=0-9,20-29\n')[1]!;
    const headEnd = section.indexOf('\r\n\r\n');
    const head = section.slice(0, headEnd);
    const length = Number(/Content-Length: (\d+)/.exec(head)![1]);
    const ct = /Content-Type: (.+)\r/.exec(head)![1]!;
    const crlfBody = Buffer.from(section.slice(headEnd + 4, headEnd + 4 + length), 'latin1');
    expect(crlfBody.length).toBe(362);
    // sloppy servers use bare LF: accepted too
    const lfBody = Buffer.from(crlfBody.toString('latin1').replace(/\r\n/g, '\n'), 'latin1');
    const boundary = multipartBoundary(ct)!;
    expect(boundary).toBe('db4fe089dad32cb9c6d14d2a1b3b00b72556d424a04805b38ac39da38f7a');
    for (const body of [lfBody, crlfBody]) {
      const parts = parseMultipartByteranges(body, boundary);
      expect(parts.map((p) => [p.start, p.end, p.total, p.data.toString()])).toEqual([
        [0, 9, 50, '0123456789'],
        [20, 29, 50, 'ABCDEFGHIJ'],
      ]);
    }
  });

  it('round-trips random parts, including data that contains the boundary', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ minLength: 1, maxLength: 300 }), { minLength: 1, maxLength: 8 }),
        fc.boolean(),
        (datas, leadingCrlf) => {
          const boundary = 'b0und4ry';
          let off = 0;
          const total = datas.reduce((s, d) => s + d.length, 0) + 10;
          const parts = datas.map((d, i) => {
            // sprinkle the delimiter into the payload: lengths must win over scanning
            const data =
              i % 2 ? Buffer.concat([Buffer.from(`\r\n--${boundary}\r\n`), Buffer.from(d)]) : Buffer.from(d);
            const p = { start: off, data, total: total + 100 };
            off += data.length;
            return p;
          });
          let body = goMultipart(boundary, parts);
          if (leadingCrlf) body = Buffer.concat([Buffer.from('\r\n'), body]);
          const got = parseMultipartByteranges(body, boundary);
          expect(got.map((g) => [g.start, g.data.toString('hex')])).toEqual(
            parts.map((p) => [p.start, p.data.toString('hex')]),
          );
        },
      ),
    );
  });

  it('reads quoted boundaries and rejects other content types', () => {
    expect(multipartBoundary('multipart/byteranges; boundary="a b\\"c"')).toBe('a b"c');
    expect(multipartBoundary('Multipart/ByteRanges;boundary=xyz; charset=x')).toBe('xyz');
    expect(multipartBoundary('application/octet-stream')).toBeUndefined();
    expect(code(() => multipartBoundary('multipart/byteranges'))).toBe('E_REGISTRY_PROTOCOL');
  });

  it('refuses bodies that do not add up', () => {
    const good = goMultipart('B', [{ start: 0, data: Buffer.from('hello'), total: 9 }]);
    expect(code(() => parseMultipartByteranges(good.subarray(0, good.length - 12), 'B'))).toBe('E_TRUNCATED');
    expect(code(() => parseMultipartByteranges(good.subarray(0, 60), 'B'))).toMatch(
      /E_TRUNCATED|E_REGISTRY_PROTOCOL/,
    );
    // data longer than the Content-Range says
    const longer = Buffer.from(good.toString('latin1').replace('hello', 'hello!'), 'latin1');
    expect(code(() => parseMultipartByteranges(longer, 'B'))).toBe('E_REGISTRY_PROTOCOL');
    // no Content-Range
    expect(
      code(() =>
        parseMultipartByteranges(Buffer.from('--B\r\nContent-Type: x\r\n\r\nabc\r\n--B--\r\n'), 'B'),
      ),
    ).toBe('E_REGISTRY_PROTOCOL');
    // unknown total
    expect(
      code(() =>
        parseMultipartByteranges(
          Buffer.from('--B\r\nContent-Range: bytes 0-2/*\r\n\r\nabc\r\n--B--\r\n'),
          'B',
        ),
      ),
    ).toBe('E_REGISTRY_PROTOCOL');
    // parts that disagree on the total
    const mixed = goMultipart('B', [
      { start: 0, data: Buffer.from('a'), total: 9 },
      { start: 1, data: Buffer.from('b'), total: 10 },
    ]);
    expect(code(() => parseMultipartByteranges(mixed, 'B'))).toBe('E_REGISTRY_PROTOCOL');
    expect(code(() => parseMultipartByteranges(Buffer.from('nothing here'), 'B'))).toBe(
      'E_REGISTRY_PROTOCOL',
    );
    expect(code(() => parseMultipartByteranges(Buffer.from('--B--\r\n'), 'B'))).toBe('E_REGISTRY_PROTOCOL');
  });

  it('never throws anything but typed errors on garbage', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), (junk) => {
        const body = Buffer.concat([
          Buffer.from('--B\r\nContent-Range: bytes 0-3/10\r\n\r\n'),
          Buffer.from(junk),
        ]);
        const c = code(() => parseMultipartByteranges(body, 'B'));
        expect(c === undefined || c === 'E_TRUNCATED' || c === 'E_REGISTRY_PROTOCOL').toBe(true);
      }),
    );
  });
});

describe('byte range helpers', () => {
  it('parses Content-Range strictly', () => {
    expect(parseContentRange('bytes 0-9/50')).toEqual({ start: 0, end: 9, total: 50 });
    expect(parseContentRange('bytes 45-49/50')).toEqual({ start: 45, end: 49, total: 50 });
    for (const bad of [
      'bytes 0-9/*',
      'bytes */50',
      'bytes 9-0/50',
      'bytes 0-50/50',
      'items 0-1/2',
      undefined,
      '',
    ]) {
      expect(code(() => parseContentRange(bad))).toBe('E_REGISTRY_PROTOCOL');
    }
  });

  it('coalesces overlapping and adjacent ranges (model check)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ offset: fc.nat(1000), length: fc.nat(100) }), { maxLength: 30 }),
        fc.nat(20),
        (rs, gap) => {
          const out = coalesce(rs, gap);
          const covered = (x: number, list: typeof rs) =>
            list.some((r) => x >= r.offset && x < r.offset + r.length);
          for (let x = 0; x < 1200; x++) if (covered(x, rs)) expect(covered(x, out)).toBe(true);
          for (let i = 1; i < out.length; i++)
            expect(out[i]!.offset).toBeGreaterThan(out[i - 1]!.offset + out[i - 1]!.length + gap);
          // nothing outside the input except gaps of at most `gap` bytes
          for (const r of out) {
            expect(covered(r.offset, rs)).toBe(true);
            expect(covered(r.offset + r.length - 1, rs)).toBe(true);
          }
        },
      ),
    );
  });

  it('writes range headers', () => {
    expect(
      rangeHeader([
        { offset: 0, length: 30 },
        { offset: 70, length: 15 },
      ]),
    ).toBe('bytes=0-29,70-84');
  });
});
