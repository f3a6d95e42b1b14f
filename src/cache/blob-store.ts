import { randomBytes } from 'node:crypto';
import * as fsp from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { rootLayout } from '../util/root-layout.js';
import { IntervalSet, type Interval } from './interval-set.js';
import { digestHex } from './paths.js';

/**
 * Where the blob store may take disk space from. The chunk cache implements it
 * (`reserveExternal` / `releaseExternal`) so compressed and decompressed bytes share one
 * `max_bytes` / `min_free_bytes` bound.
 */
export interface DiskBudget {
  /** Ask for `bytes` more on disk; false: do not store them. */
  reserve(bytes: number): boolean | Promise<boolean>;
  /** Give back bytes reserved earlier (the blob was removed). */
  release(bytes: number): void;
}

/** The part of a FileHandle the store uses (tests inject failures through it). */
export interface BlobFileHandle {
  write(
    buffer: Uint8Array,
    offset: number,
    length: number,
    position: number,
  ): Promise<{ bytesWritten: number }>;
  read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  datasync(): Promise<void>;
  stat(): Promise<{ size: number }>;
  close(): Promise<void>;
}

/** The filesystem calls the store makes; node:fs/promises by default. */
export interface BlobFs {
  open(path: string, flags: string, mode?: number): Promise<BlobFileHandle>;
  readFile(path: string): Promise<Buffer>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
  mkdir(path: string, opts: { recursive: true; mode: number }): Promise<unknown>;
  readdir(path: string): Promise<string[]>;
}

const nodeFs: BlobFs = {
  open: (path, flags, mode) => fsp.open(path, flags, mode),
  readFile: (path) => fsp.readFile(path),
  rename: (from, to) => fsp.rename(from, to),
  unlink: (path) => fsp.unlink(path),
  mkdir: (path, opts) => fsp.mkdir(path, opts),
  readdir: (path) => fsp.readdir(path),
};

export interface BlobStoreOptions {
  /** Store root; blobs live in `<root>/blobs/sha256/`. */
  root: string;
  /** Disk accounting shared with the chunk cache; default: unbounded (ENOSPC still handled). */
  budget?: DiskBudget;
  /** Persist the coverage record after this many newly stored bytes. Default 4 MiB. */
  checkpointBytes?: number;
  /** ... or this long after the first unrecorded write. Default 1000 ms. */
  checkpointMs?: number;
  /** fdatasync the data before recording it (power-loss safety). Default true. */
  durable?: boolean;
  logger?: Logger;
  /** Filesystem calls (tests inject failures). */
  fs?: BlobFs;
}

export interface BlobStoreStats {
  /** Blobs with local bytes (open or found on disk). */
  blobs: number;
  /** Bytes accounted against the budget. */
  diskBytes: number;
  /** Bytes written to blob files by this process. */
  bytesWritten: number;
  /** Bytes not stored because the budget refused them. */
  bytesRefused: number;
  /** Failed writes (the store disables itself on the first). */
  writeErrors: number;
  /** Coverage records written. */
  checkpoints: number;
  /** Storing is off (ENOSPC or another write error); reads of stored bytes still work. */
  disabled: boolean;
}

/** Overhead accounted per blob (the data file's and the record's metadata blocks). */
const BLOB_OVERHEAD = 8192;
const RECORD_VERSION = 1;

interface CoverageRecord {
  v: number;
  digest: string;
  size: number;
  intervals: Array<[number, number]>;
}

/**
 * Compressed bytes of registry blobs kept locally until their layer is fully verified, so that
 * a restart at any point loses nothing already received: `<root>/blobs/sha256/<hex>.partial` is a
 * sparse file holding the byte ranges received so far at their blob offsets, and
 * `<hex>.coverage` the list of ranges known to be in it.
 *
 * Crash safety: the record is replaced atomically (temp file + fsync + rename) and only ever
 * lists ranges whose data was written (and, with `durable`, fdatasync'ed) BEFORE the record was
 * taken, so after a crash the record may lag the data (those bytes are fetched again) but never
 * lead it. An unreadable or inconsistent record is treated as "nothing stored". Bytes served from
 * here are compressed input: every chunk decoded from them is still checked against its digest and
 * the whole stream against the DiffID, so a damaged file costs a refetch, never wrong bytes.
 *
 * On ENOSPC (or any other write error) the store stops storing, warns once and keeps serving
 * what it has; removing a blob (space freed) turns storing back on.
 */
export class BlobStore {
  readonly dir: string;
  /** @internal */ readonly fs: BlobFs;
  /** @internal */ readonly logger: Logger;
  /** @internal */ readonly checkpointBytes: number;
  /** @internal */ readonly checkpointMs: number;
  /** @internal */ readonly durable: boolean;
  private readonly budget: DiskBudget | undefined;
  private readonly open = new Map<string, LocalBlob>();
  private readonly opening = new Map<string, Promise<LocalBlob>>();
  /** Bytes accounted for blobs found on disk at start and not opened yet. */
  private readonly adopted = new Map<string, number>();
  private disabledReason: string | undefined;
  private closed = false;
  /** @internal */ readonly counters = { bytesWritten: 0, bytesRefused: 0, writeErrors: 0, checkpoints: 0 };

  private constructor(opts: BlobStoreOptions) {
    this.dir = rootLayout(opts.root).blobs;
    this.fs = opts.fs ?? nodeFs;
    this.logger = opts.logger ?? silentLogger;
    this.budget = opts.budget;
    this.checkpointBytes = opts.checkpointBytes ?? 4 * 1024 * 1024;
    this.checkpointMs = opts.checkpointMs ?? 1000;
    this.durable = opts.durable ?? true;
    for (const [k, v] of Object.entries({
      checkpointBytes: this.checkpointBytes,
      checkpointMs: this.checkpointMs,
    })) {
      if (!Number.isFinite(v) || v < 0)
        throw new StoreError('E_CONFIG', `blob store ${k} must be >= 0`, { [k]: v });
    }
  }

  /**
   * Create the directory, remove leftovers of a crash (temp records, data files without a record
   * and the reverse) and account the blobs found against the budget; blobs the budget refuses are
   * deleted.
   */
  static async open(opts: BlobStoreOptions): Promise<BlobStore> {
    const store = new BlobStore(opts);
    await store.fs.mkdir(store.dir, { recursive: true, mode: 0o700 });
    await store.scan();
    return store;
  }

  private async scan(): Promise<void> {
    const names = await this.fs.readdir(this.dir);
    const data = new Set<string>();
    const records = new Set<string>();
    for (const name of names) {
      const m = /^([0-9a-f]{64})\.(partial|coverage)$/.exec(name);
      if (m === null) {
        // temp records of a crashed checkpoint and anything else that is not ours to keep
        await this.fs.unlink(join(this.dir, name)).catch(() => undefined);
        continue;
      }
      (m[2] === 'partial' ? data : records).add(m[1]!);
    }
    for (const hex of new Set([...data, ...records])) {
      const record = data.has(hex) && records.has(hex) ? await this.loadRecord(hex) : undefined;
      if (record === undefined) {
        await this.deleteFiles(hex);
        continue;
      }
      const bytes =
        IntervalSet.from(record.intervals.map(([start, end]) => ({ start, end }))).size + BLOB_OVERHEAD;
      if (this.budget !== undefined && !(await this.budget.reserve(bytes))) {
        this.logger.info(
          { digest: `sha256:${hex}`, bytes },
          'partial blob does not fit the cache bounds; removed',
        );
        await this.deleteFiles(hex);
        continue;
      }
      this.adopted.set(hex, bytes);
    }
  }

  /** @internal The record of `hex` if it is well-formed, else undefined. */
  async loadRecord(hex: string): Promise<CoverageRecord | undefined> {
    let parsed: unknown;
    try {
      parsed = JSON.parse((await this.fs.readFile(this.recordPath(hex))).toString('utf8'));
    } catch {
      return undefined;
    }
    const r = parsed as Partial<CoverageRecord>;
    if (
      r.v !== RECORD_VERSION ||
      r.digest !== `sha256:${hex}` ||
      !Number.isSafeInteger(r.size) ||
      r.size! < 0 ||
      !Array.isArray(r.intervals)
    ) {
      return undefined;
    }
    for (const iv of r.intervals) {
      if (
        !Array.isArray(iv) ||
        iv.length !== 2 ||
        !Number.isSafeInteger(iv[0]) ||
        !Number.isSafeInteger(iv[1]) ||
        iv[0] < 0 ||
        iv[1] <= iv[0] ||
        iv[1] > r.size!
      ) {
        return undefined;
      }
    }
    return r as CoverageRecord;
  }

  /** @internal */
  dataPath(hex: string): string {
    return join(this.dir, `${hex}.partial`);
  }

  /** @internal */
  recordPath(hex: string): string {
    return join(this.dir, `${hex}.coverage`);
  }

  private async deleteFiles(hex: string): Promise<void> {
    await this.fs.unlink(this.dataPath(hex)).catch(() => undefined);
    await this.fs.unlink(this.recordPath(hex)).catch(() => undefined);
  }

  /**
   * The local copy of blob `digest` (`size` compressed bytes), created empty if there is none.
   * One instance per digest: concurrent and repeated calls share it.
   */
  async openBlob(digest: string, size: number): Promise<LocalBlob> {
    const hex = digestHex(digest);
    if (!Number.isSafeInteger(size) || size < 0) {
      throw new StoreError('E_INVALID_ARGUMENT', 'blob size must be a non-negative integer', {
        digest,
        size,
      });
    }
    if (this.closed) throw new StoreError('E_ABORTED', 'blob store closed', { digest });
    const existing = this.open.get(hex);
    if (existing !== undefined) {
      checkSize(existing, size);
      return existing;
    }
    let p = this.opening.get(hex);
    if (p === undefined) {
      p = this.load(hex, size).finally(() => this.opening.delete(hex));
      this.opening.set(hex, p);
    }
    const blob = await p;
    checkSize(blob, size);
    return blob;
  }

  private async load(hex: string, size: number): Promise<LocalBlob> {
    const record = await this.loadRecord(hex);
    let coverage = new IntervalSet();
    let fh: BlobFileHandle;
    let accounted = this.adopted.get(hex);
    this.adopted.delete(hex);
    if (record !== undefined && record.size === size) {
      try {
        fh = await this.fs.open(this.dataPath(hex), 'r+');
        // A record never leads its data, but a data file shortened behind our back would.
        const fileSize = (await fh.stat()).size;
        coverage = IntervalSet.from(record.intervals.map(([start, end]) => ({ start, end })));
        coverage.delete(fileSize, size);
      } catch {
        fh = await this.recreate(hex);
        coverage = new IntervalSet();
      }
    } else {
      if (record !== undefined) {
        this.logger.warn(
          { digest: `sha256:${hex}`, size, recorded: record.size },
          'partial blob has another size; discarded',
        );
      }
      fh = await this.recreate(hex);
    }
    if (accounted !== undefined && coverage.size === 0) {
      // what the scan accounted for was just discarded
      this.release(accounted);
      accounted = 0;
    }
    if (accounted === undefined) {
      accounted = 0;
      // Not seen by the scan (no budget then, or created since): account what is on disk if the
      // budget allows; otherwise it stays unaccounted until removed (it is bounded by the blob).
      if (this.budget !== undefined && coverage.size > 0) {
        const want = coverage.size + BLOB_OVERHEAD;
        if (await this.budget.reserve(want)) accounted = want;
      }
    }
    const blob = new LocalBlob(this, hex, size, fh, coverage, accounted);
    this.open.set(hex, blob);
    return blob;
  }

  /** Empty data file (truncating stale bytes) and no record. */
  private async recreate(hex: string): Promise<BlobFileHandle> {
    await this.fs.unlink(this.recordPath(hex)).catch(() => undefined);
    return await this.fs.open(this.dataPath(hex), 'w+', 0o600);
  }

  /** The local copy of `digest` if some layer has it open now, else undefined (synchronous). */
  opened(digest: string): LocalBlob | undefined {
    try {
      return this.open.get(digestHex(digest));
    } catch {
      return undefined; // not a sha256 digest: nothing of ours
    }
  }

  /** Delete the local copy of `digest` (after its layer was fully verified, or to start over). */
  async remove(digest: string): Promise<void> {
    const hex = digestHex(digest);
    const opening = this.opening.get(hex);
    if (opening !== undefined) await opening.catch(() => undefined);
    const blob = this.open.get(hex);
    let bytes = this.adopted.get(hex) ?? 0;
    this.adopted.delete(hex);
    if (blob !== undefined) {
      this.open.delete(hex);
      bytes += await blob.shutdown(false);
    }
    await this.deleteFiles(hex);
    if (bytes > 0) this.budget?.release(bytes);
    // Space was freed: a store stopped by a full disk may store again.
    if (this.disabledReason === 'ENOSPC' || this.disabledReason === 'EDQUOT') {
      this.disabledReason = undefined;
      this.logger.info('blob store: space freed, storing compressed bytes again');
    }
  }

  /** Digests with local bytes (open or found on disk at start). */
  list(): string[] {
    return [...new Set([...this.open.keys(), ...this.adopted.keys()])].map((hex) => `sha256:${hex}`);
  }

  stats(): BlobStoreStats {
    let diskBytes = 0;
    for (const v of this.adopted.values()) diskBytes += v;
    for (const b of this.open.values()) diskBytes += b.accountedBytes;
    return {
      blobs: this.open.size + this.adopted.size,
      diskBytes,
      ...this.counters,
      disabled: this.disabled,
    };
  }

  get disabled(): boolean {
    return this.disabledReason !== undefined;
  }

  /** @internal Ask the budget for `bytes`; false when storing is off or refused. */
  async reserve(bytes: number): Promise<boolean> {
    if (this.disabled || this.closed) return false;
    if (this.budget === undefined) return true;
    for (;;) {
      if (await this.budget.reserve(bytes)) return true;
      // Blobs left by an earlier run and not opened since belong to layers not in use: they
      // give way to the ones being fetched now.
      const victim = this.adopted.keys().next();
      if (victim.done === true) break;
      this.logger.info({ digest: `sha256:${victim.value}` }, 'removing unused partial blob to make room');
      await this.remove(`sha256:${victim.value}`);
    }
    this.counters.bytesRefused += bytes;
    return false;
  }

  /** @internal */
  release(bytes: number): void {
    if (bytes > 0) this.budget?.release(bytes);
  }

  /** @internal A write or checkpoint failed: stop storing (once), keep serving. */
  writeFailed(err: unknown, digest: string): void {
    this.counters.writeErrors++;
    if (this.disabledReason !== undefined) return;
    this.disabledReason = (err as NodeJS.ErrnoException).code ?? 'EIO';
    this.logger.warn(
      { err, digest },
      'cannot store compressed layer bytes; storing stopped (stored bytes are still served, the rest is fetched from the registry)',
    );
  }

  /** Record every blob's coverage and close the files. Blobs stay on disk for the next start. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.opening.values()].map((p) => p.catch(() => undefined)));
    const blobs = [...this.open.values()];
    this.open.clear();
    await Promise.all(blobs.map((b) => b.shutdown(true)));
  }
}

/** The chunk cache as the blob store's budget: both share `max_bytes` / `min_free_bytes`. */
export function chunkCacheBudget(cache: {
  reserveExternal(bytes: number): Promise<boolean>;
  releaseExternal(bytes: number): void;
}): DiskBudget {
  return { reserve: (n) => cache.reserveExternal(n), release: (n) => cache.releaseExternal(n) };
}

function checkSize(blob: LocalBlob, size: number): void {
  if (blob.size !== size) {
    throw new StoreError('E_INVALID_ARGUMENT', 'blob opened with two different sizes', {
      digest: blob.digest,
      size,
      known: blob.size,
    });
  }
}

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
  private unrecorded = 0;
  private timer: NodeJS.Timeout | undefined;
  private checkpointing: Promise<void> | undefined;
  private again = false;
  private readonly inflight = new Set<Promise<unknown>>();
  private closed = false;

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
  readonly onCompressedBytes = (offset: number, data: Buffer): void => {
    let p: Promise<number>;
    try {
      p = this.write(offset, data);
    } catch (err) {
      this.store.logger.warn(
        { err, digest: this.digest, offset },
        'compressed bytes outside the blob; dropped',
      );
      return;
    }
    p.catch((err: unknown) =>
      this.store.logger.warn({ err, digest: this.digest, offset }, 'cannot store bytes'),
    );
  };

  /** Bytes [offset, offset+length); they must be covered (else E_NOT_FOUND). */
  async read(offset: number, length: number): Promise<Buffer> {
    this.checkRange(offset, length);
    const end = offset + length;
    const notFound = (): StoreError =>
      new StoreError('E_NOT_FOUND', 'range not stored locally', { digest: this.digest, offset, length });
    const out = Buffer.allocUnsafe(length);
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
        let done = t.start;
        while (done < t.end) {
          const { bytesWritten } = await this.fh.write(buf, done - offset, t.end - done, done);
          if (bytesWritten <= 0)
            throw new StoreError('E_IO', 'short write to local blob file', { digest: this.digest });
          done += bytesWritten;
        }
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

  /** Wait for writes in flight and record the coverage durably. */
  async flush(): Promise<void> {
    await Promise.all([...this.inflight]);
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

  /** @internal Close (recording the coverage when `record`); returns the accounted bytes. */
  async shutdown(record: boolean): Promise<number> {
    this.closed = true;
    await Promise.all([...this.inflight].map((p) => p.catch(() => undefined)));
    if (record) await this.checkpoint();
    else if (this.checkpointing !== undefined) await this.checkpointing;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.fh.close().catch(() => undefined);
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
