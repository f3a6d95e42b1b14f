import { StoreError, type ErrorContext } from '../util/errors.js';
import { parseContentRange, rangeHeader, type ByteRange } from './byte-ranges.js';
import { multipartBoundary, parseMultipartByteranges } from './multipart.js';
import { dump, statusError, type Response } from './transport.js';
import { networkErrorCode } from './retry.js';

/** Bytes of the blob starting at `offset`. */
export interface Span {
  offset: number;
  data: Buffer;
}

export type RangeOutcome =
  | { kind: 'parts'; spans: Span[]; bytes: number; multipart: boolean }
  /** The server answered 200 with the whole blob: we kept what was asked and hung up. */
  | { kind: 'whole-blob'; spans: Span[]; bytes: number }
  /** 400/416 to a multi-range request: the server does not do multi-range. */
  | { kind: 'multi-rejected'; status: number };

/** Overhead allowance for multipart framing per part (headers + boundaries). */
const PART_OVERHEAD = 512;

function headerString(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Interpret the answer to a `Range` GET of `ranges` (sorted, non-overlapping) on a blob of
 * `size` bytes. Every byte returned is positioned by the server's Content-Range (or by stream
 * position for a 200), and every Content-Range must name `size` as the total, so a confused
 * server produces an error rather than misplaced bytes.
 */
export async function consumeRangeResponse(
  res: Response,
  ranges: readonly ByteRange[],
  size: number,
  digest: string,
  ctx: ErrorContext,
): Promise<RangeOutcome> {
  const c = { ...ctx, status: res.status };
  const dcd = headerString(res.headers['docker-content-digest']);
  if (dcd !== undefined && dcd !== digest && res.status < 300) {
    await dump(res);
    throw new StoreError('E_REGISTRY_PROTOCOL', `registry served ${dcd.slice(0, 80)} for ${digest}`, c);
  }
  const multi = ranges.length > 1;
  if (res.status === 206) {
    const boundary = multipartBoundary(res.headers['content-type']);
    if (boundary !== undefined) {
      const want = ranges.reduce((s, r) => s + r.length, 0) + PART_OVERHEAD * (ranges.length + 1);
      const body = await readAll(res, want, c);
      const parts = parseMultipartByteranges(body, boundary);
      for (const p of parts) checkTotal(p.total, size, c);
      return {
        kind: 'parts',
        spans: parts.map((p) => ({ offset: p.start, data: p.data })),
        bytes: body.length,
        multipart: true,
      };
    }
    const cr = parseContentRange(res.headers['content-range'], c);
    checkTotal(cr.total, size, c);
    const len = cr.end - cr.start + 1;
    const data = await readExactly(res, len, c);
    return { kind: 'parts', spans: [{ offset: cr.start, data }], bytes: len, multipart: false };
  }
  if (res.status === 200) {
    const cl = Number(headerString(res.headers['content-length']));
    if (Number.isFinite(cl) && cl !== size) {
      await dump(res);
      throw new StoreError(
        'E_REGISTRY_PROTOCOL',
        `200 response of ${cl} bytes to a range request on a ${size}-byte blob`,
        c,
      );
    }
    const { spans, bytes } = await extractFromWhole(res, ranges, size, c);
    return { kind: 'whole-blob', spans, bytes };
  }
  if (multi && (res.status === 400 || res.status === 416)) {
    await dump(res);
    return { kind: 'multi-rejected', status: res.status };
  }
  if (res.status === 416) {
    await dump(res);
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      `registry says range ${rangeHeader(ranges).slice(0, 100)} is not satisfiable`,
      c,
    );
  }
  throw await statusError(res, c);
}

function checkTotal(total: number, size: number, ctx: ErrorContext): void {
  if (total !== size) {
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      `Content-Range total ${total} differs from blob size ${size}`,
      { ...ctx, total, size },
    );
  }
}

async function readAll(res: Response, max: number, ctx: ErrorContext): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  try {
    for await (const b of res.body as AsyncIterable<Buffer>) {
      n += b.length;
      if (n > max) {
        res.body.destroy();
        throw new StoreError(
          'E_REGISTRY_PROTOCOL',
          `multipart response larger than the ${max} bytes requested`,
          ctx,
        );
      }
      chunks.push(b);
    }
  } catch (err) {
    throw bodyError(err, res, ctx);
  }
  return Buffer.concat(chunks, n);
}

/** Body of a plain 206 straight into one buffer of the announced length. */
async function readExactly(res: Response, len: number, ctx: ErrorContext): Promise<Buffer> {
  const cl = Number(headerString(res.headers['content-length']));
  if (Number.isFinite(cl) && cl !== len) {
    await dump(res);
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      `Content-Length ${cl} disagrees with Content-Range length ${len}`,
      ctx,
    );
  }
  const out = Buffer.allocUnsafe(len);
  let n = 0;
  try {
    for await (const b of res.body as AsyncIterable<Buffer>) {
      if (n + b.length > len) {
        res.body.destroy();
        throw new StoreError(
          'E_REGISTRY_PROTOCOL',
          `range body longer than its Content-Range (${len} bytes)`,
          ctx,
        );
      }
      b.copy(out, n);
      n += b.length;
    }
  } catch (err) {
    throw bodyError(err, res, ctx);
  }
  if (n !== len)
    throw new StoreError('E_TRUNCATED', `range body ended after ${n} of ${len} bytes`, {
      ...ctx,
      got: n,
      expected: len,
    });
  return out;
}

/** Take the requested ranges out of a full-blob stream and hang up after the last one. */
async function extractFromWhole(
  res: Response,
  ranges: readonly ByteRange[],
  size: number,
  ctx: ErrorContext,
): Promise<{ spans: Span[]; bytes: number }> {
  const spans = ranges.map((r) => ({ offset: r.offset, data: Buffer.allocUnsafe(r.length) }));
  const stopAt = Math.max(...ranges.map((r) => r.offset + r.length));
  let pos = 0;
  let ri = 0;
  try {
    for await (const b of res.body as AsyncIterable<Buffer>) {
      const bEnd = pos + b.length;
      // copy into every range overlapping this chunk
      for (let k = ri; k < spans.length; k++) {
        const s = spans[k]!;
        const from = Math.max(pos, s.offset);
        const to = Math.min(bEnd, s.offset + s.data.length);
        if (s.offset >= bEnd) break;
        if (from < to) b.copy(s.data, from - s.offset, from - pos, to - pos);
      }
      while (ri < spans.length && spans[ri]!.offset + spans[ri]!.data.length <= bEnd) ri++;
      pos = bEnd;
      if (pos >= stopAt) {
        res.body.destroy();
        break;
      }
      if (pos > size)
        throw new StoreError('E_REGISTRY_PROTOCOL', `body longer than the ${size}-byte blob`, ctx);
    }
  } catch (err) {
    throw bodyError(err, res, ctx);
  }
  if (pos < stopAt) {
    throw new StoreError('E_TRUNCATED', `blob body ended after ${pos} bytes, needed ${stopAt}`, {
      ...ctx,
      got: pos,
      expected: stopAt,
    });
  }
  return { spans, bytes: pos };
}

function bodyError(err: unknown, res: Response, ctx: ErrorContext): unknown {
  if (err instanceof StoreError || res.signal.aborted) return err;
  return new StoreError(
    'E_REGISTRY_NETWORK',
    `connection failed while reading ranges: ${networkErrorCode(err)}`,
    ctx,
    { cause: err },
  );
}
