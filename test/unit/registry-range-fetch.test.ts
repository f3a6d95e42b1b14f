/**
 * consumeRangeOrStream copies each body piece out and gives back the memory of the pieces that
 * are the whole of their buffer (Node's socket reads): never a piece sharing its buffer with
 * other bytes (a read that also held headers, Node's allocation pool), and never bytes the
 * result still needs.
 */
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { consumeRangeOrStream } from '../../src/registry/range-fetch.js';
import type { Response } from '../../src/registry/transport.js';

const SIZE = 1 << 20;
const BLOB = Buffer.alloc(SIZE);
for (let i = 0; i < SIZE; i++) BLOB[i] = (i * 7 + 3) & 0xff;

/** A copy of blob bytes [from, to) in a buffer of its own, as Node hands a socket read. */
const ownRead = (from: number, to: number): Buffer => {
  const b = Buffer.allocUnsafeSlow(to - from);
  BLOB.copy(b, 0, from, to);
  return b;
};

function response(status: number, headers: Record<string, string>, pieces: Buffer[]): Response {
  return {
    status,
    headers,
    body: Readable.from(pieces, { objectMode: false }) as unknown as Response['body'],
    url: new URL('http://127.0.0.1/v2/x/blobs/sha256:0'),
    signal: new AbortController().signal,
  };
}

describe('consumeRangeOrStream gives socket reads back', () => {
  it('a single range: whole pieces are released once copied, shared ones are left alone', async () => {
    const from = 1000;
    const to = 300_000;
    const whole1 = ownRead(from, from + 65_536);
    // a read that also held the response headers: the body is a view of part of it
    const withHeaders = Buffer.allocUnsafeSlow(65_536 + 200);
    BLOB.copy(withHeaders, 200, from + 65_536, from + 131_072);
    const partial = withHeaders.subarray(200);
    // a small piece from Node's shared pool, beside a neighbour's bytes
    const neighbour = Buffer.from('neighbour bytes');
    const pooled = Buffer.from(BLOB.subarray(from + 131_072, from + 131_072 + 100));
    expect(pooled.buffer).toBe(neighbour.buffer);
    const whole2 = ownRead(from + 131_172, to);
    const res = response(
      206,
      { 'content-range': `bytes ${from}-${to - 1}/${SIZE}`, 'content-length': String(to - from) },
      [whole1, partial, pooled, whole2],
    );
    const out = await consumeRangeOrStream(res, [{ offset: from, length: to - from }], SIZE, 'sha256:0', {});
    expect(out.kind).toBe('parts');
    if (out.kind !== 'parts') return;
    expect(out.spans).toHaveLength(1);
    expect(out.spans[0]!.offset).toBe(from);
    expect(out.spans[0]!.data.equals(BLOB.subarray(from, to))).toBe(true);
    expect(whole1.length).toBe(0);
    expect(whole2.length).toBe(0);
    expect(partial.length).toBe(65_536);
    expect(withHeaders.length).toBe(65_536 + 200);
    expect(pooled.length).toBe(100);
    expect(neighbour.toString()).toBe('neighbour bytes');
  });

  it('a multipart answer: parts are correct after the pieces they came in were released', async () => {
    const boundary = 'BOUNDARY';
    const head = (a: number, b: number): string =>
      `--${boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes ${a}-${b - 1}/${SIZE}\r\n\r\n`;
    const body = Buffer.concat([
      Buffer.from(head(0, 70_000)),
      BLOB.subarray(0, 70_000),
      Buffer.from('\r\n' + head(500_000, 600_000)),
      BLOB.subarray(500_000, 600_000),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const pieces: Buffer[] = [];
    for (let at = 0; at < body.length; at += 65_536) {
      const p = Buffer.allocUnsafeSlow(Math.min(65_536, body.length - at));
      body.copy(p, 0, at, at + p.length);
      pieces.push(p);
    }
    const res = response(206, { 'content-type': `multipart/byteranges; boundary=${boundary}` }, pieces);
    const out = await consumeRangeOrStream(
      res,
      [
        { offset: 0, length: 70_000 },
        { offset: 500_000, length: 100_000 },
      ],
      SIZE,
      'sha256:0',
      {},
    );
    expect(out.kind).toBe('parts');
    if (out.kind !== 'parts') return;
    expect(out.spans.map((s) => s.offset)).toEqual([0, 500_000]);
    expect(out.spans[0]!.data.equals(BLOB.subarray(0, 70_000))).toBe(true);
    expect(out.spans[1]!.data.equals(BLOB.subarray(500_000, 600_000))).toBe(true);
    expect(pieces.every((p) => p.length === 0)).toBe(true);
  });
});
