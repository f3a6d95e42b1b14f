import { StoreError, type ErrorContext } from '../util/errors.js';
import { coalesce, type ByteRange } from './byte-ranges.js';
import type { Span } from './range-fetch.js';

/** Byte arithmetic over fetched spans: what is still missing, and a range's bytes out of them. */

/** Bytes in `ranges`. */
export function covered(ranges: readonly ByteRange[]): number {
  return ranges.reduce((s, r) => s + r.length, 0);
}

/** `ranges` (sorted, disjoint) minus everything the spans hold. */
export function subtract(ranges: readonly ByteRange[], spans: readonly Span[]): ByteRange[] {
  const have = coalesce(spans.map((s) => ({ offset: s.offset, length: s.data.length })));
  const out: ByteRange[] = [];
  for (const r of ranges) {
    let pos = r.offset;
    const end = r.offset + r.length;
    for (const h of have) {
      const hEnd = h.offset + h.length;
      if (hEnd <= pos || h.offset >= end) continue;
      if (h.offset > pos) out.push({ offset: pos, length: h.offset - pos });
      pos = Math.max(pos, hEnd);
      if (pos >= end) break;
    }
    if (pos < end) out.push({ offset: pos, length: end - pos });
  }
  return out;
}

/** Bytes of `r` from sorted spans: a view when one span holds them, else stitched. */
export function extract(spans: readonly Span[], r: ByteRange, ctx: ErrorContext): Buffer {
  if (r.length === 0) return Buffer.alloc(0);
  const end = r.offset + r.length;
  for (const s of spans) {
    if (s.offset <= r.offset && s.offset + s.data.length >= end) {
      return s.data.subarray(r.offset - s.offset, end - s.offset);
    }
  }
  const out = Buffer.allocUnsafe(r.length);
  let pos = r.offset;
  for (const s of spans) {
    const sEnd = s.offset + s.data.length;
    if (sEnd <= pos || s.offset > pos) continue;
    const to = Math.min(end, sEnd);
    s.data.copy(out, pos - r.offset, pos - s.offset, to - s.offset);
    pos = to;
    if (pos >= end) break;
  }
  if (pos < end) {
    throw new StoreError('E_REGISTRY_PROTOCOL', `bytes from ${pos} missing after fetch`, {
      ...ctx,
      offset: pos,
    });
  }
  return out;
}
