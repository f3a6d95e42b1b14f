import { randomBytes } from 'node:crypto';
import { StoreError } from '../util/errors.js';
import { DIRECT_ALIGN, writeDirectAt } from '../util/direct-write.js';
import { spanBuffers } from '../util/span-buffers.js';
import { RECORD_VERSION, BLOB_OVERHEAD, type BlobFileHandle, type CoverageRecord } from './blob-files.js';
import type { BlobStore } from './blob-store.js';
import { IntervalSet, type Interval } from './interval-set.js';

/** Bytes handed to write() whose disk write has not completed: readable from memory meanwhile. */
interface PendingPiece {
  start: number;
  end: number;
  /** data[i] is the blob's byte at offset base + i. */
  data: Uint8Array;
  base: number;
}

/**
 * One blob's local compressed bytes. The shape the layer engine uses as its `localBytes`
 * provider (`covered`, `held`, `read`) and `onCompressedBytes` sink; plus `missing` and `write`.
 * Bytes count as held from the moment write() is called (served from the caller's buffer until
 * the disk write completes), so a span received once is never fetched again meanwhile.
 */
export class LocalBlob {
  readonly digest: string;
  /** Bytes stored and readable (the data write completed). */
  private readonly stored: IntervalSet;
  /** Bytes being written right now (readable from `pieces`, not to be written twice). */
  private readonly pending = new IntervalSet();
  private readonly pieces = new Set<PendingPiece>();
  private accounted: number;
  /** Bytes stored since the last checkpoint round took its snapshot. */
  private unrecorded = 0;
  /** Bytes of the snapshot the running checkpoint round is making durable. */
  private recording = 0;
  private timer: NodeJS.Timeout | undefined;
  private checkpointing: Promise<void> | undefined;
  private again = false;
  private readonly inflight = new Set<Promise<unknown>>();
  private closed = false;
  /** The data file opened a second time, for O_DIRECT writes (see writeRange). */
  private direct: Promise<BlobFileHandle | undefined> | undefined;

  /** @internal use BlobStore.openBlob */
  constructor(
    private readonly store: BlobStore,
    private readonly hex: string,
    readonly size: number,
    private readonly fh: BlobFileHandle,
    stored: IntervalSet,
    accounted: number,
  ) {
    this.digest = `sha256:${hex}`;
    this.stored = stored;
    this.accounted = accounted;
  }

  /** Bytes accounted against the budget for this blob. */
  get accountedBytes(): number {
    return this.accounted;
  }

  /** Compressed bytes stored locally. */
  get bytesCovered(): number {
    return this.stored.size;
  }

  /** Every byte of the blob is stored locally (the DiffID can be checked without network). */
  get complete(): boolean {
    return this.stored.covers(0, this.size);
  }

  /** The stored ranges, sorted. */
  coverage(): Interval[] {
    return this.stored.intervals();
  }

  /** True when [offset, offset+length) can be read locally (stored or being stored). */
  covered(offset: number, length: number): boolean {
    for (const m of this.stored.missing(offset, offset + length)) {
      if (!this.pending.covers(m.start, m.end)) return false;
    }
    return true;
  }

  /** The parts of [offset, offset+length) not held locally (what to fetch), in order. */
  missing(offset: number, length: number): Interval[] {
    const out: Interval[] = [];
    for (const m of this.stored.missing(offset, Math.min(this.size, offset + length))) {
      out.push(...this.pending.missing(m.start, m.end));
    }
    return out;
  }

  /** The held parts of [offset, offset+length), sorted and disjoint (engine seam `held`). */
  held(offset: number, length: number): Array<{ offset: number; length: number }> {
    const end = Math.min(this.size, offset + length);
    const set = IntervalSet.from(this.stored.overlap(offset, end));
    for (const iv of this.pending.overlap(offset, end)) set.add(iv.start, iv.end);
    return set.intervals().map((iv) => ({ offset: iv.start, length: iv.end - iv.start }));
  }

  /**
   * Engine seam `onCompressedBytes`: store bytes received from the network, fire and forget.
   * Never throws (a range outside the blob is logged and dropped).
   */
  readonly onCompressedBytes = (offset: number, data: Buffer): Promise<void> | undefined => {
    let p: Promise<number>;
    try {
      p = this.write(offset, data);
    } catch (err) {
      this.store.logger.warn(
        { err, digest: this.digest, offset },
        'compressed bytes outside the blob; dropped',
      );
      return undefined;
    }
    // settles once the write no longer reads `data` (CompressedBytesSink)
    return p.then(
      () => undefined,
      (err: unknown) => this.store.logger.warn({ err, digest: this.digest, offset }, 'cannot store bytes'),
    );
  };

  /** Bytes [offset, offset+length); they must be covered (else E_NOT_FOUND). */
  async read(offset: number, length: number): Promise<Buffer> {
    this.checkRange(offset, length);
    const end = offset + length;
    const notFound = (): StoreError =>
      new StoreError('E_NOT_FOUND', 'range not stored locally', { digest: this.digest, offset, length });
    // from span-buffers: the span fetcher gives a local read back once its decodes are done
    const out = spanBuffers.take(length);
    // Parts still being written come from memory, copied now (same tick as the check), so a
    // write completing or failing meanwhile cannot change what is read.
    for (const m of this.stored.missing(offset, end)) {
      let pos = m.start;
      while (pos < m.end) {
        const piece = this.pieceAt(pos);
        if (piece === undefined) throw notFound();
        const to = Math.min(m.end, piece.end);
        out.set(piece.data.subarray(pos - piece.base, to - piece.base), pos - offset);
        pos = to;
      }
    }
    for (const s of this.stored.overlap(offset, end)) {
      let done = s.start;
      while (done < s.end) {
        const { bytesRead } = await this.fh.read(out, done - offset, s.end - done, done);
        if (bytesRead === 0) {
          // The file is shorter than its record says (changed behind our back): forget the rest.
          this.stored.delete(done, this.size);
          throw new StoreError('E_TRUNCATED', 'local blob file shorter than recorded', {
            digest: this.digest,
            offset: done,
          });
        }
        done += bytesRead;
      }
    }
    return out;
  }

  private pieceAt(pos: number): PendingPiece | undefined {
    for (const p of this.pieces) if (p.start <= pos && pos < p.end) return p;
    return undefined;
  }

  /**
   * Store `buf` as the blob's bytes at `offset`. Idempotent: only the parts neither stored nor
   * being written are written, so overlapping and repeated writes cost nothing. Never throws for
   * I/O (a failed write just stores nothing); returns the number of bytes newly stored.
   */
  async write(offset: number, buf: Uint8Array): Promise<number> {
    this.checkRange(offset, buf.length);
    if (this.closed) return 0;
    const todo: Interval[] = [];
    for (const m of this.stored.missing(offset, offset + buf.length))
      todo.push(...this.pending.missing(m.start, m.end));
    if (todo.length === 0) return 0;
    let want = 0;
    const pieces: PendingPiece[] = [];
    for (const t of todo) {
      this.pending.add(t.start, t.end);
      const piece = { start: t.start, end: t.end, data: buf, base: offset };
      this.pieces.add(piece);
      pieces.push(piece);
      want += t.end - t.start;
    }
    const p = this.writeParts(offset, buf, pieces, want);
    this.inflight.add(p);
    try {
      return await p;
    } finally {
      this.inflight.delete(p);
    }
  }

  private async writeParts(
    offset: number,
    buf: Uint8Array,
    todo: PendingPiece[],
    want: number,
  ): Promise<number> {
    let granted = false;
    let stored = 0;
    try {
      // a blob's first bytes also pay for its files' metadata
      const ask = want + (this.accounted === 0 ? BLOB_OVERHEAD : 0);
      granted = await this.store.reserve(ask);
      if (!granted || this.closed) {
        if (granted) this.store.release(ask);
        return 0;
      }
      this.accounted += ask;
      for (const t of todo) {
        await this.writeRange(buf, offset, t.start, t.end);
        // readable from the file from now on
        this.stored.add(t.start, t.end);
        this.pending.delete(t.start, t.end);
        this.pieces.delete(t);
        stored += t.end - t.start;
      }
    } catch (err) {
      this.store.writeFailed(err, this.digest);
    } finally {
      for (const t of todo) {
        if (!this.pieces.delete(t)) continue;
        this.pending.delete(t.start, t.end);
      }
    }
    if (stored > 0) {
      this.store.counters.bytesWritten += stored;
      this.unrecorded += stored;
      if (this.complete || this.unrecorded >= this.store.checkpointBytes) void this.checkpoint();
      else this.armTimer();
    }
    return stored;
  }

  /**
   * Forget [offset, offset+length) (its bytes were found bad: a chunk decoded from them failed
   * its digest). They are fetched and written again on the next use.
   */
  async invalidate(offset: number, length: number): Promise<void> {
    this.stored.delete(offset, offset + length);
    await this.checkpoint();
  }

  /**
   * Bytes handed over whose coverage is not durably recorded yet (being written, written since the
   * last snapshot, or in the snapshot being recorded): what a crash right now would lose.
   */
  get unsettledBytes(): number {
    return this.pending.size + this.unrecorded + this.recording;
  }

  /**
   * Resolves at once while at most `settleBytes` are unsettled, else once everything handed
   * over so far is durably recorded. The background fetch waits on it, so a crash loses a bounded
   * number of received bytes and a slow disk (fdatasync under load) slows the fetch instead of
   * piling received bytes up in memory.
   */
  async settle(): Promise<void> {
    if (this.closed || this.store.disabled || this.unsettledBytes <= this.store.settleBytes) return;
    await this.flush();
  }

  /** Wait for writes in flight and record the coverage durably. */
  async flush(): Promise<void> {
    await Promise.all([...this.inflight]);
    if (this.closed) return;
    await this.checkpoint();
  }

  private armTimer(): void {
    if (this.timer !== undefined || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.checkpoint();
    }, this.store.checkpointMs);
    this.timer.unref();
  }

  /**
   * Persist the coverage: snapshot the stored ranges (every one of them was written already),
   * fdatasync the data, then replace the record atomically. Calls during a checkpoint coalesce
   * into one more round. Never throws.
   */
  private checkpoint(): Promise<void> {
    if (this.checkpointing !== undefined) {
      this.again = true;
      return this.checkpointing;
    }
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.checkpointing = (async () => {
      do {
        this.again = false;
        const snapshot = this.stored.intervals();
        this.recording = this.unrecorded;
        this.unrecorded = 0;
        try {
          if (this.store.durable) await this.fh.datasync();
          await this.writeRecord(snapshot);
          this.store.counters.checkpoints++;
        } catch (err) {
          this.store.writeFailed(err, this.digest);
          return;
        }
      } while (this.again);
    })().finally(() => {
      this.recording = 0;
      this.checkpointing = undefined;
    });
    return this.checkpointing;
  }

  private async writeRecord(intervals: Interval[]): Promise<void> {
    const record: CoverageRecord = {
      v: RECORD_VERSION,
      digest: this.digest,
      size: this.size,
      intervals: intervals.map((iv) => [iv.start, iv.end]),
    };
    const file = this.store.recordPath(this.hex);
    const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
    const data = Buffer.from(JSON.stringify(record));
    const fs = this.store.fs;
    let written = false;
    try {
      const fh = await fs.open(tmp, 'wx', 0o600);
      try {
        let done = 0;
        while (done < data.length)
          done += (await fh.write(data, done, data.length - done, done)).bytesWritten;
        if (this.store.durable) await fh.datasync();
      } finally {
        await fh.close();
      }
      await fs.rename(tmp, file);
      written = true;
    } finally {
      if (!written) await fs.unlink(tmp).catch(() => undefined);
    }
  }

  /**
   * Bytes [start, end) of the blob from `buf` (holding the blob from `offset`). The page-aligned
   * middle of a large range skips the page cache while the store fills fast
   * (BlobStore.wantsDirect): through it, these writes were the thread pool's largest cost in a cold
   * model read on loopback (`pwrite` into fresh page-cache pages 43 % of its samples, every fresh
   * page-cache page faulting in this VM); with no local writes at all the read ran at 215 vs 165
   * MB/s (bench/README.md, session 30). The partial pages at both ends go through the page cache,
   * so no page is ever written both ways (the kernel drops cached copies of directly written pages).
   * The bytes are read back rarely and sequentially (a decode from local bytes, the DiffID check).
   */
  private async writeRange(buf: Uint8Array, offset: number, start: number, end: number): Promise<void> {
    const a = Math.ceil(start / DIRECT_ALIGN) * DIRECT_ALIGN;
    const b = Math.floor(end / DIRECT_ALIGN) * DIRECT_ALIGN;
    const direct = this.store.wantsDirect(end - start, b - a) ? await this.directHandle() : undefined;
    if (direct === undefined) {
      await this.writeBuffered(buf, offset, start, end);
      return;
    }
    await this.writeBuffered(buf, offset, start, a);
    try {
      await writeDirectAt(direct, buf.subarray(a - offset, b - offset), a);
    } catch (err) {
      if ((err as { code?: unknown }).code !== 'E_NO_DIRECT') throw err;
      this.store.refuseDirect(err);
      await this.writeBuffered(buf, offset, a, b);
    }
    await this.writeBuffered(buf, offset, b, end);
  }

  private async writeBuffered(buf: Uint8Array, offset: number, start: number, end: number): Promise<void> {
    let done = start;
    while (done < end) {
      const { bytesWritten } = await this.fh.write(buf, done - offset, end - done, done);
      if (bytesWritten <= 0)
        throw new StoreError('E_IO', 'short write to local blob file', { digest: this.digest });
      done += bytesWritten;
    }
  }

  /** The data file opened for direct writes, once; undefined when the file system refuses. */
  private directHandle(): Promise<BlobFileHandle | undefined> {
    this.direct ??= (async () => {
      try {
        return await this.store.fs.openDirect!(this.store.dataPath(this.hex));
      } catch (err) {
        if ((err as { code?: unknown }).code === 'E_NO_DIRECT') this.store.refuseDirect(err);
        else
          this.store.logger.warn(
            { err, digest: this.digest },
            'cannot open local blob file for direct writes',
          );
        return undefined;
      }
    })();
    return this.direct;
  }

  /** @internal Close (recording the coverage when `record`); returns the accounted bytes. */
  async shutdown(record: boolean): Promise<number> {
    this.closed = true;
    await Promise.all([...this.inflight].map((p) => p.catch(() => undefined)));
    if (record) await this.checkpoint();
    else if (this.checkpointing !== undefined) await this.checkpointing;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.fh.close().catch(() => undefined);
    await (await this.direct?.catch(() => undefined))?.close().catch(() => undefined);
    const bytes = this.accounted;
    this.accounted = 0;
    return bytes;
  }

  private checkRange(offset: number, length: number): void {
    if (
      !Number.isSafeInteger(offset) ||
      !Number.isSafeInteger(length) ||
      offset < 0 ||
      length < 0 ||
      offset + length > this.size
    ) {
      throw new StoreError('E_INVALID_ARGUMENT', 'range outside the blob', {
        digest: this.digest,
        offset,
        length,
        size: this.size,
      });
    }
  }
}
