import type { CompressedBytesSink } from './compressed-store.js';

/** Smallest piece handed to the sink while a fetch streams (fewer, larger local writes). */
export const PROGRESS_PIECE_BYTES = 256 * 1024;

/**
 * Hands a fetch's bytes to the compressed-bytes sink (the local blob store) while they arrive, in
 * pieces of at least `pieceBytes`, so a fetch given up half way (a preempted background unit)
 * keeps what it received: the unit's next run reads those bytes locally and fetches only the
 * rest. When the fetch completes, only the bytes not delivered yet go to the sink: each byte
 * reaches it once.
 */
export class ProgressDelivery {
  private pending: { offset: number; parts: Buffer[]; length: number } | undefined;
  /** Delivered spans [offset, end), in arrival order. */
  private readonly delivered: Array<{ offset: number; end: number }> = [];
  private deliveredTotal = 0;
  /** The sink's writes not settled yet (it reads the views it was given until then). */
  private readonly writing = new Set<Promise<unknown>>();

  constructor(
    private readonly sink: CompressedBytesSink,
    private readonly pieceBytes = PROGRESS_PIECE_BYTES,
  ) {}

  /** ReadRangesOptions.onProgress: `data` is a stable view (blob-read.ts), kept without a copy. */
  readonly onProgress = (offset: number, data: Buffer): void => {
    if (data.length === 0) return;
    const p = this.pending;
    if (p !== undefined && p.offset + p.length === offset) {
      const last = p.parts[p.parts.length - 1]!;
      // consecutive views of one result buffer grow into one view: no concat at the flush
      if (last.buffer === data.buffer && last.byteOffset + last.length === data.byteOffset) {
        p.parts[p.parts.length - 1] = Buffer.from(last.buffer, last.byteOffset, last.length + data.length);
      } else p.parts.push(data);
      p.length += data.length;
    } else {
      this.flush();
      this.pending = { offset, parts: [data], length: data.length };
    }
    if (this.pending!.length >= this.pieceBytes) this.flush();
  };

  /** Deliver what is held back (the fetch ended, or was given up). */
  flush(): void {
    const p = this.pending;
    if (p === undefined) return;
    this.pending = undefined;
    this.delivered.push({ offset: p.offset, end: p.offset + p.length });
    this.deliveredTotal += p.length;
    this.send(p.offset, p.parts.length === 1 ? p.parts[0]! : Buffer.concat(p.parts, p.length));
  }

  private send(offset: number, data: Buffer): void {
    const w = this.sink(offset, data);
    if (w === undefined) return;
    const settled: Promise<unknown> = Promise.resolve(w).then(
      () => this.writing.delete(settled),
      () => this.writing.delete(settled),
    );
    this.writing.add(settled);
  }

  /**
   * Settles once the sink no longer reads any view it was handed so far: then the fetched
   * buffer may be given back (layer/span-fetcher.ts). Never rejects.
   */
  async settled(): Promise<void> {
    while (this.writing.size > 0) await Promise.all(this.writing);
  }

  /** Bytes handed to the sink so far. */
  get deliveredBytes(): number {
    return this.deliveredTotal;
  }

  /** Deliver the parts of a completed range the sink has not had yet. */
  deliverRest(offset: number, data: Buffer): void {
    this.flush();
    let pieces = [{ offset, end: offset + data.length }];
    for (const d of this.delivered) {
      pieces = pieces.flatMap((r) => {
        if (d.end <= r.offset || d.offset >= r.end) return [r];
        const out: Array<{ offset: number; end: number }> = [];
        if (d.offset > r.offset) out.push({ offset: r.offset, end: d.offset });
        if (d.end < r.end) out.push({ offset: d.end, end: r.end });
        return out;
      });
    }
    for (const r of pieces) this.send(r.offset, data.subarray(r.offset - offset, r.end - offset));
  }
}
