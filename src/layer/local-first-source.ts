import type { BlobSource, ByteRange, ReadRangesOptions } from './types.js';

type FetchOptions = ReadRangesOptions;
import { coalesce, type Interval } from '../cache/interval-set.js';
import type { LocalBlob } from '../cache/blob-store.js';

export interface LocalFirstOptions {
  /** Missing parts closer than this are fetched as one range (re-fetching the gap). Default 64 KiB. */
  maxGap?: number;
  /**
   * Widen every fetch to multiples of this (aligned to offset 0) and store all of it: set it to
   * the blob reader's block size, which rounds requests that way anyway (the rounded-up bytes
   * would otherwise arrive and be dropped). Default 0: no widening.
   */
  alignBytes?: number;
  /** Called with the byte count of every range fetched from `inner` (accounting, tests). */
  onNetworkBytes?: (bytes: number) => void;
}

/**
 * A BlobSource that answers from the local copy of the blob where it can and fetches only the
 * missing parts from `inner` (the registry), storing what it fetched. Every layer read, prefetch
 * and background unit going through it is therefore fetched at most once, across restarts too.
 * With `bypassCache` (the re-check after a DiffID mismatch) the local bytes of the ranges are dropped
 * and fetched again.
 *
 * Concurrent requests for the same missing bytes are not merged here (the layer engine shares
 * its in-flight spans); the blob store writes each byte once anyway.
 */
export class LocalFirstSource implements BlobSource {
  private readonly maxGap: number;
  private readonly align: number;
  private networkBytes = 0;
  private localBytes = 0;

  constructor(
    private readonly inner: BlobSource,
    readonly blob: LocalBlob,
    private readonly opts: LocalFirstOptions = {},
  ) {
    this.maxGap = opts.maxGap ?? 64 * 1024;
    this.align = Math.max(0, Math.floor(opts.alignBytes ?? 0));
  }

  get size(): number {
    return this.inner.size;
  }

  /** Bytes fetched from `inner` and bytes served locally, by this instance. */
  stats(): { networkBytes: number; localBytes: number } {
    return { networkBytes: this.networkBytes, localBytes: this.localBytes };
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    return (await this.readRanges([{ offset, length }], { signal }))[0]!;
  }

  async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    const signal = opts.signal;
    if (opts.bypassCache === true) {
      for (const r of ranges) await this.blob.invalidate(r.offset, r.length);
    }
    const wanted: Interval[] = [];
    for (const r of ranges) {
      for (const m of this.blob.missing(r.offset, r.length)) wanted.push(m);
    }
    wanted.sort((a, b) => a.start - b.start);
    const fetchList = coalesce(this.widen(mergeSorted(wanted)), this.maxGap);
    const fetched = await this.fetch(fetchList, signal, opts);
    // Store before answering: the next reader of these bytes finds them locally.
    await Promise.all(fetched.map((f) => this.blob.write(f.start, f.data)));
    return await Promise.all(ranges.map((r) => this.assemble(r, fetched, signal, opts)));
  }

  /** Intervals widened to `align` boundaries (clipped at the blob end), merged again. */
  private widen(list: Interval[]): Interval[] {
    if (this.align <= 1) return list;
    const a = this.align;
    const out = list.map((iv) => ({
      start: Math.floor(iv.start / a) * a,
      end: Math.min(this.size, Math.ceil(iv.end / a) * a),
    }));
    return mergeSorted(out);
  }

  private async fetch(
    list: Interval[],
    signal: AbortSignal | undefined,
    opts: FetchOptions | undefined,
  ): Promise<Array<Interval & { data: Buffer }>> {
    if (list.length === 0) return [];
    const ranges = list.map((iv) => ({ offset: iv.start, length: iv.end - iv.start }));
    const bufs = await this.inner.readRanges(ranges, { ...opts, signal });
    let n = 0;
    const out = list.map((iv, i) => {
      n += bufs[i]!.length;
      return { ...iv, data: bufs[i]! };
    });
    this.networkBytes += n;
    this.opts.onNetworkBytes?.(n);
    return out;
  }

  /**
   * Stored bytes; if the local copy fails us (file changed behind our back: the store forgets
   * the range), from `inner` instead.
   */
  private async local(
    offset: number,
    length: number,
    signal: AbortSignal | undefined,
    opts: FetchOptions | undefined,
  ): Promise<Buffer> {
    try {
      const buf = await this.blob.read(offset, length);
      this.localBytes += length;
      return buf;
    } catch {
      const [f] = await this.fetch([{ start: offset, end: offset + length }], signal, opts);
      await this.blob.write(offset, f!.data);
      return f!.data;
    }
  }

  /** The requested range from the fetched buffers, the rest from the local copy. */
  private async assemble(
    r: ByteRange,
    fetched: Array<Interval & { data: Buffer }>,
    signal: AbortSignal | undefined,
    opts: FetchOptions | undefined,
  ): Promise<Buffer> {
    const end = r.offset + r.length;
    const within = fetched.find((f) => f.start <= r.offset && f.end >= end);
    if (within !== undefined) return within.data.subarray(r.offset - within.start, end - within.start);
    if (fetched.length === 0 || !fetched.some((f) => f.start < end && f.end > r.offset)) {
      return await this.local(r.offset, r.length, signal, opts);
    }
    const out = Buffer.allocUnsafe(r.length);
    let pos = r.offset;
    while (pos < end) {
      const f = fetched.find((x) => x.start <= pos && x.end > pos);
      if (f !== undefined) {
        const to = Math.min(end, f.end);
        f.data.copy(out, pos - r.offset, pos - f.start, to - f.start);
        pos = to;
        continue;
      }
      // local up to the next fetched piece (it was not missing, so it is stored)
      let to = end;
      for (const x of fetched) if (x.start > pos && x.start < to) to = x.start;
      const local = await this.local(pos, to - pos, signal, opts);
      local.copy(out, pos - r.offset);
      pos = to;
    }
    return out;
  }
}

/** Merge overlapping intervals of a sorted list (ranges requested together may overlap). */
function mergeSorted(list: Interval[]): Interval[] {
  const out: Interval[] = [];
  for (const iv of list) {
    const last = out[out.length - 1];
    if (last !== undefined && iv.start <= last.end) last.end = Math.max(last.end, iv.end);
    else out.push({ ...iv });
  }
  return out;
}
