import type { ByteRange } from './blob-read.js';

/**
 * THE range merge of the store: sort, drop empty ranges, merge ranges that overlap, touch or are
 * at most `gap` bytes apart (one request for both is cheaper than two when the gap is small), then
 * cut the result into pieces of at most `maxLength` bytes. Inputs are not modified.
 */
export function coalesce(ranges: readonly ByteRange[], gap = 0, maxLength = Infinity): ByteRange[] {
  const sorted = ranges.filter((r) => r.length > 0).sort((a, b) => a.offset - b.offset);
  const merged: ByteRange[] = [];
  for (const r of sorted) {
    const last = merged[merged.length - 1];
    if (last && r.offset <= last.offset + last.length + gap) {
      const end = Math.max(last.offset + last.length, r.offset + r.length);
      last.length = end - last.offset;
    } else {
      merged.push({ offset: r.offset, length: r.length });
    }
  }
  if (!(maxLength < Infinity)) return merged;
  const step = Math.max(1, Math.floor(maxLength));
  const out: ByteRange[] = [];
  for (const r of merged) {
    const end = r.offset + r.length;
    for (let s = r.offset; s < end; s += step) out.push({ offset: s, length: Math.min(end, s + step) - s });
  }
  return out;
}
