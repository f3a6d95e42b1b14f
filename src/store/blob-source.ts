import { raceSignal } from '../util/abort.js';
import {
  asBlobSource,
  type BlobRangeSource,
  type ByteRange,
  type ReadRangesOptions,
} from '../util/blob-read.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { checkRange, type RangeReader } from '../util/range-reader.js';

/** A RangeReader that may also implement the blob-read contract (the registry blob reader does). */
export type MultiRangeReader = RangeReader & Partial<BlobRangeSource>;

/** Bytes [offset, offset + length) of a blob from its tail `held`, which starts at blob offset `start`. */
function heldSlice(held: Buffer, start: number, offset: number, length: number): Buffer {
  return held.subarray(offset - start, offset - start + length);
}

/**
 * A registry blob whose size is already known (from the saved record or the manifest), opened only
 * when a byte is actually needed: a restarted store serves cached content without any request,
 * and a failed open (registry down, credentials gone) is retried by the next read instead of being
 * remembered.
 */
export class LazyBlob implements RangeReader, BlobRangeSource {
  private opening: Promise<MultiRangeReader> | undefined;
  private opened: MultiRangeReader | undefined;
  /** Bytes [heldStart, size) read when the TOC was opened (footer, TOC, the data before it). */
  private held: Buffer | undefined;
  private heldStart = Infinity;
  /** A tail read started ahead (prefetchTail), until it lands or fails. */
  private pending: { offset: number; done: Promise<void> } | undefined;

  constructor(
    readonly size: number,
    /** Opens the real reader; its signal is the blob's own (never a single caller's). */
    private readonly open: (signal: AbortSignal) => Promise<MultiRangeReader>,
    private readonly ctx: ErrorContext,
  ) {}

  /** True once the registry blob has been opened (tests, status). */
  get isOpen(): boolean {
    return this.opened !== undefined;
  }

  private reader(signal?: AbortSignal): Promise<MultiRangeReader> {
    if (this.opened) return Promise.resolve(this.opened);
    if (!this.opening) {
      const p = this.open(new AbortController().signal).then((r) => {
        if (r.size !== this.size) {
          throw new StoreError(
            'E_REGISTRY_PROTOCOL',
            `registry blob is ${r.size} bytes, expected ${this.size}`,
            {
              ...this.ctx,
              size: r.size,
              expected: this.size,
            },
          );
        }
        this.opened = r;
        return r;
      });
      this.opening = p;
      // forget a failure: the next read tries again
      p.catch(() => {
        if (this.opening === p) this.opening = undefined;
      });
    }
    return raceSignal(this.opening, signal, this.ctx);
  }

  /**
   * Keep the blob's end (from `offset`), read once to open the TOC: reads of it (the last files'
   * chunks, the background pass) are answered from here instead of fetching those bytes again.
   */
  holdTail(offset: number, bytes: Buffer): void {
    if (offset + bytes.length !== this.size || offset >= this.heldStart) return;
    this.held = bytes;
    this.heldStart = offset;
  }

  /**
   * Start reading the blob's end from `offset` now, before anyone asks for it (the TOC's first
   * read, while the resolution still waits for the image config): held as the tail when it
   * arrives, and a read inside it meanwhile waits for it instead of fetching it again. A failed
   * prefetch is forgotten (the read then fetches by itself).
   */
  prefetchTail(offset: number): void {
    if (this.pending !== undefined || offset >= this.heldStart || offset < 0 || offset >= this.size) return;
    const p = this.reader()
      .then((r) => r.read(offset, this.size - offset))
      .then(
        (bytes) => this.holdTail(offset, bytes),
        () => undefined,
      )
      .finally(() => {
        if (this.pending?.done === p) this.pending = undefined;
      });
    this.pending = { offset, done: p };
  }

  /** Reads inside a tail still being prefetched wait for it (raced against their signal). */
  private async afterPrefetch(offset: number, signal?: AbortSignal): Promise<void> {
    const pending = this.pending;
    if (pending !== undefined && offset >= pending.offset) await raceSignal(pending.done, signal, this.ctx);
  }

  /** Forget the held tail (its bytes are fetched again if ever read). */
  dropTail(): void {
    this.held = undefined;
    this.heldStart = Infinity;
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    checkRange(this.size, offset, length);
    if (length === 0) return Buffer.alloc(0);
    await this.afterPrefetch(offset, signal);
    if (this.held !== undefined && offset >= this.heldStart) {
      return heldSlice(this.held, this.heldStart, offset, length);
    }
    return await (await this.reader(signal)).read(offset, length, signal);
  }

  /**
   * The blob-read contract; `bypassCache` travels to the opened reader (and skips the held tail).
   * Only the parts before the held tail go to the registry.
   */
  async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    for (const r of ranges) checkRange(this.size, r.offset, r.length);
    if (ranges.length > 0) await this.afterPrefetch(Math.max(...ranges.map((r) => r.offset)), opts.signal);
    // the tail as it is now: dropTail() may run while the registry answers
    const held = this.held;
    const start = opts.bypassCache === true || held === undefined ? Infinity : this.heldStart;
    const fromHeld = (offset: number, length: number): Buffer => heldSlice(held!, start, offset, length);
    if (ranges.every((r) => r.offset >= start)) return ranges.map((r) => fromHeld(r.offset, r.length));
    const remote = ranges
      .filter((r) => r.offset < start)
      .map((r) => ({ offset: r.offset, length: Math.min(r.length, start - r.offset) }));
    const inner = asBlobSource(await this.reader(opts.signal));
    const got = await inner.readRanges(remote, opts);
    let i = 0;
    return ranges.map((r) => {
      if (r.offset >= start) return fromHeld(r.offset, r.length);
      const head = got[i++]!;
      if (r.offset + r.length <= start) return head;
      return Buffer.concat([head, fromHeld(start, r.offset + r.length - start)]);
    });
  }
}

/**
 * Bytes [start, size) of a blob held in memory (the saved TOC + footer), everything before them
 * from `inner`. Lets the format reader re-open a layer from disk without the registry.
 */
/**
 * The blob when only its saved tail exists (a check, start-up pins): anything before the tail
 * would need the registry, so reading it fails.
 */
export class OfflineBlob implements RangeReader {
  constructor(readonly size: number) {}
  read(offset: number): Promise<Buffer> {
    return Promise.reject(
      new StoreError('E_TRUNCATED', `saved TOC does not cover offset ${offset}; it would need the registry`),
    );
  }
}

export class TailReader implements RangeReader {
  constructor(
    private readonly inner: RangeReader,
    private readonly start: number,
    private readonly tail: Buffer,
  ) {
    if (start + tail.length !== inner.size) {
      throw new StoreError('E_INVALID_ARGUMENT', 'saved tail does not end at the blob end', {
        start,
        length: tail.length,
        size: inner.size,
      });
    }
  }

  get size(): number {
    return this.inner.size;
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    checkRange(this.size, offset, length);
    if (offset >= this.start) return this.tail.subarray(offset - this.start, offset - this.start + length);
    return await this.inner.read(offset, length, signal);
  }
}

/** Remembers what was read through it, so the bytes the format reader fetched can be saved. */
export class RecordingReader implements RangeReader {
  private readonly spans: Array<{ offset: number; data: Buffer }> = [];

  constructor(private readonly inner: RangeReader) {}

  get size(): number {
    return this.inner.size;
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    const data = await this.inner.read(offset, length, signal);
    this.spans.push({ offset, data });
    return data;
  }

  /** Where the recorded reads begin to cover the blob's end without a hole (size: nothing recorded). */
  tailStart(): number {
    let start = this.size;
    for (const s of [...this.spans].sort((a, b) => b.offset - a.offset)) {
      if (s.offset + s.data.length >= start) start = Math.min(start, s.offset);
    }
    return start;
  }

  /** Bytes [from, size) if the recorded reads cover them, else undefined. */
  tail(from: number): Buffer | undefined {
    const end = this.size;
    if (from >= end) return Buffer.alloc(0);
    const out = Buffer.allocUnsafe(end - from);
    // mark coverage by walking the spans sorted by offset
    const sorted = [...this.spans].sort((a, b) => a.offset - b.offset);
    let pos = from;
    for (const s of sorted) {
      const sEnd = s.offset + s.data.length;
      if (sEnd <= pos) continue;
      if (s.offset > pos) return undefined;
      s.data.copy(out, pos - from, pos - s.offset, sEnd - s.offset);
      pos = sEnd;
      if (pos >= end) return out;
    }
    return pos >= end ? out : undefined;
  }
}
