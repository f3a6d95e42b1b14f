import type { ByteRange } from '../util/blob-read.js';
import { StoreError } from '../util/errors.js';

export type { ByteRange } from '../util/blob-read.js';

/** Sort and merge ranges that overlap or touch (or are at most `gap` bytes apart). Empty ranges vanish. */
export function coalesce(ranges: readonly ByteRange[], gap = 0): ByteRange[] {
  const sorted = ranges.filter((r) => r.length > 0).sort((a, b) => a.offset - b.offset);
  const out: ByteRange[] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && r.offset <= last.offset + last.length + gap) {
      const end = Math.max(last.offset + last.length, r.offset + r.length);
      last.length = end - last.offset;
    } else {
      out.push({ offset: r.offset, length: r.length });
    }
  }
  return out;
}

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
