import type { ByteRange } from '../util/blob-read.js';
import { StoreError } from '../util/errors.js';

export type { ByteRange } from '../util/blob-read.js';
// the one range merge (util/byte-range.ts), re-exported for the registry's readers
export { coalesce } from '../util/byte-range.js';

/** `bytes=a-b,c-d` (inclusive ends, no spaces). */
export function rangeHeader(ranges: readonly ByteRange[]): string {
  return `bytes=${ranges.map((r) => `${r.offset}-${r.offset + r.length - 1}`).join(',')}`;
}

export interface ContentRange {
  /** first byte */
  start: number;
  /** last byte, inclusive */
  end: number;
  total: number;
}

/**
 * `Content-Range: bytes <start>-<end>/<total>`. An unknown total (`*`) is rejected: without it we
 * cannot tell that the server is talking about the blob we think it is.
 */
export function parseContentRange(
  v: string | string[] | undefined,
  ctx: Record<string, string | number | undefined> = {},
): ContentRange {
  const s = Array.isArray(v) ? v[0] : v;
  const m = s === undefined ? null : /^\s*bytes\s+(\d+)-(\d+)\/(\d+|\*)\s*$/i.exec(s);
  if (!m) {
    throw new StoreError(
      'E_REGISTRY_PROTOCOL',
      `bad Content-Range ${JSON.stringify(s ?? null).slice(0, 80)}`,
      ctx,
    );
  }
  if (m[3] === '*') throw new StoreError('E_REGISTRY_PROTOCOL', 'Content-Range without a total size', ctx);
  const start = Number(m[1]);
  const end = Number(m[2]);
  const total = Number(m[3]);
  if (
    !Number.isSafeInteger(start) ||
    !Number.isSafeInteger(end) ||
    !Number.isSafeInteger(total) ||
    end < start ||
    end >= total
  ) {
    throw new StoreError('E_REGISTRY_PROTOCOL', `inconsistent Content-Range ${s!.slice(0, 80)}`, ctx);
  }
  return { start, end, total };
}
