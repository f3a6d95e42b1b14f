import { StoreError, type ErrorContext } from '../util/errors.js';
import { parseContentRange, rangeHeader, type ByteRange } from './byte-ranges.js';
import { multipartBoundary, parseMultipartByteranges } from './multipart.js';
import { dump, statusError, type Response } from './transport.js';
import { networkErrorCode } from './retry.js';
import { releaseBuffer } from '../util/release-buffer.js';
import { spanBuffers } from '../util/span-buffers.js';

/** Bytes of the blob starting at `offset`. */
export interface Span {
  offset: number;
  data: Buffer;
}

export type RangeOutcome =
  | { kind: 'parts'; spans: Span[]; bytes: number; multipart: boolean }
  /** 400/404/416/501 to a multi-range request: the server does not do multi-range (or not this many). */
  | { kind: 'multi-rejected'; status: number }
  /**
   * 200 and the whole blob, whatever Range said: handed back unread (the body is now the
   * caller's), for a WholeBlobStream to serve every waiting read from that one response.
   */
  | { kind: 'whole-blob-stream'; res: Response };

/** Statuses by which servers refuse multi-range requests (Zot 416 above 16, Spegel 404, CDNs 400/501). */
const MULTI_REFUSALS = new Set([400, 404, 416, 501]);

/** Overhead allowance for multipart framing per part (headers + boundaries). */
const PART_OVERHEAD = 512;

function headerString(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Interpret the answer to a `Range` GET of `ranges` (sorted, non-overlapping) on a blob of
 * `size` bytes. Every byte returned is positioned by the server's Content-Range, and every
 * Content-Range must name `size` as the total, so a confused server produces an error rather
 * than misplaced bytes. A 200 (the whole blob) comes back unread as `whole-blob-stream`.
 */
export async function consumeRangeOrStream(
  res: Response,
  ranges: readonly ByteRange[],
  size: number,
  digest: string,
  ctx: ErrorContext,
  onProgress?: (offset: number, data: Buffer) => void,
): Promise<RangeOutcome> {
  const c = { ...ctx, status: res.status };
  const dcd = headerString(res.headers['docker-content-digest']);
  if (dcd !== undefined && dcd !== digest && res.status < 300) {
    await dump(res);
    throw new StoreError('E_REGISTRY_PROTOCOL', `registry served ${dcd.slice(0, 80)} for ${digest}`, c);
  }
  const multi = ranges.length > 1;
  if (res.status === 206) {
    const span = requestedSpan(ranges);
    let boundary = multipartBoundary(res.headers['content-type']);
    // A multipart body whose Content-Type got lost on the way (some proxies drop it): no
    // Content-Range header on a multi-range answer, the boundary is the body's first line.
    const sniff = boundary === undefined && multi && res.headers['content-range'] === undefined;
    if (boundary !== undefined || sniff) {
      const want = ranges.reduce((s, r) => s + r.length, 0) + PART_OVERHEAD * (ranges.length + 1);
      const body = await readAll(res, want, c);
      boundary ??= sniffBoundary(body, c);
      const parts = parseMultipartByteranges(body, boundary);
      for (const p of parts) {
        checkTotal(p.total, size, c);
        checkPart(p.start, p.end + 1, ranges, span, c);
      }
      return {
        kind: 'parts',
        spans: parts.map((p) => ({ offset: p.start, data: p.data })),
        bytes: body.length,
        multipart: true,
      };
    }
    const cr = parseContentRange(res.headers['content-range'], c);
    try {
      checkTotal(cr.total, size, c);
      // before allocating anything: the part must be (part of) what was asked for
      checkPart(cr.start, cr.end + 1, ranges, span, c);
      checkContentLength(res, cr.end - cr.start + 1, c);
    } catch (err) {
      await dump(res);
      throw err;
    }
    const { spans, bytes } = await collectRanges(res, ranges, cr.start, cr.end + 1, c, onProgress);
    return { kind: 'parts', spans, bytes, multipart: false };
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
    return { kind: 'whole-blob-stream', res };
  }
  if (multi && MULTI_REFUSALS.has(res.status)) {
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

/** `--<boundary>` on the first non-empty line of a multipart body. */
function sniffBoundary(body: Buffer, ctx: ErrorContext): string {
  const head = body
    .subarray(0, 512)
    .toString('latin1')
    .replace(/^(\r?\n)+/, '');
  const m = /^--([^\r\n]{1,200})\r?\n/.exec(head);
  if (!m) {
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      '206 to a multi-range request with neither Content-Range nor a multipart body',
      ctx,
    );
  }
  return m[1]!.trimEnd();
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
  const body = Buffer.concat(chunks, n);
  for (const b of chunks) giveBackSocketRead(b);
  return body;
}

/**
 * A body piece's bytes were copied out: give its memory back now, not at the next full garbage
 * collection. undici hands body pieces as views into the buffer Node read from the socket (one
 * per read, 64 KiB on a fast link); a piece that is the whole of that buffer was parsed to its end
 * and nothing else reads it, so it is freed (util/release-buffer.ts frees nothing else: a read
 * that also held headers, or a parser stopped half way through it, gives a partial view, left to
 * the collector). Left to the collector, a cold model read's socket buffers piled up in malloc's
 * heap between collections: 27-41 MB of the store's peak RSS (bench/README.md, session 18).
 */
function giveBackSocketRead(b: Buffer): void {
  releaseBuffer(b, { counted: false });
}

/** [first requested byte, end of the last requested range). */
function requestedSpan(ranges: readonly ByteRange[]): { start: number; end: number } {
  let start = Infinity;
  let end = 0;
  for (const r of ranges) {
    start = Math.min(start, r.offset);
    end = Math.max(end, r.offset + r.length);
  }
  return { start, end };
}

/**
 * A 206 part [start, end) must overlap a requested range and stay inside the requested span (a
 * server may coalesce ranges, gaps included, but never send more). This bounds every allocation
 * by what we asked for, whatever Content-Range claims.
 */
function checkPart(
  start: number,
  end: number,
  ranges: readonly ByteRange[],
  span: { start: number; end: number },
  ctx: ErrorContext,
): void {
  if (start < span.start || end > span.end) {
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      `206 part bytes ${start}-${end - 1} reaches outside the requested bytes ${span.start}-${span.end - 1}`,
      { ...ctx, partStart: start, partEnd: end },
    );
  }
  if (!ranges.some((r) => r.offset < end && start < r.offset + r.length)) {
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      `206 part bytes ${start}-${end - 1} overlaps none of the requested ranges`,
      { ...ctx, partStart: start, partEnd: end },
    );
  }
}

function checkContentLength(res: Response, len: number, ctx: ErrorContext): void {
  const cl = Number(headerString(res.headers['content-length']));
  if (Number.isFinite(cl) && cl !== len) {
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      `Content-Length ${cl} disagrees with Content-Range length ${len}`,
      ctx,
    );
  }
}

/**
 * Copy the requested ranges out of a body holding blob bytes [base, bodyEnd): only the parts of
 * `ranges` inside it are allocated (never the body's announced size). The body is read to its end
 * so the connection can be reused.
 */
async function collectRanges(
  res: Response,
  ranges: readonly ByteRange[],
  base: number,
  bodyEnd: number,
  ctx: ErrorContext,
  onProgress?: (offset: number, data: Buffer) => void,
): Promise<{ spans: Span[]; bytes: number }> {
  const spans: Span[] = [];
  for (const r of ranges) {
    const from = Math.max(base, r.offset);
    const to = Math.min(bodyEnd, r.offset + r.length);
    // the caller's alone: its last holder gives it back (layer/span-fetcher.ts)
    if (from < to) spans.push({ offset: from, data: spanBuffers.take(to - from) });
  }
  spans.sort((x, y) => x.offset - y.offset);
  const need = bodyEnd;
  let pos = base;
  let si = 0;
  try {
    for await (const b of res.body as AsyncIterable<Buffer>) {
      const bEnd = pos + b.length;
      if (bEnd > bodyEnd) {
        res.body.destroy();
        throw new StoreError(
          'E_REGISTRY_PROTOCOL',
          `response body runs past byte ${bodyEnd} (its Content-Range)`,
          ctx,
        );
      }
      // copy into every span overlapping this chunk
      for (let k = si; k < spans.length; k++) {
        const s = spans[k]!;
        if (s.offset >= bEnd) break;
        const from = Math.max(pos, s.offset);
        const to = Math.min(bEnd, s.offset + s.data.length);
        if (from < to) {
          b.copy(s.data, from - s.offset, from - pos, to - pos);
          // the requested bytes as they arrive (a caller that gives up keeps them): a view of the
          // result buffer, which is never written there again, so it can be kept without a copy
          onProgress?.(from, s.data.subarray(from - s.offset, to - s.offset));
        }
      }
      while (si < spans.length && spans[si]!.offset + spans[si]!.data.length <= bEnd) si++;
      pos = bEnd;
      giveBackSocketRead(b);
    }
  } catch (err) {
    throw bodyError(err, res, ctx);
  }
  if (pos < need) {
    throw new StoreError('E_TRUNCATED', `range body ended after ${pos - base} of ${need - base} bytes`, {
      ...ctx,
      got: pos - base,
      expected: need - base,
    });
  }
  return { spans, bytes: pos - base };
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
