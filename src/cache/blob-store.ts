import { join } from 'node:path';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { rootLayout } from '../util/root-layout.js';
import {
  BLOB_OVERHEAD,
  RECORD_VERSION,
  nodeFs,
  type BlobFs,
  type BlobFileHandle,
  type CoverageRecord,
  type DiskBudget,
} from './blob-files.js';
import { IntervalSet } from './interval-set.js';
import { LocalBlob } from './local-blob.js';
import { DIRECT_MIN_BYTES, DIRECT_MIN_RATE, WriteRate } from './write-rate.js';
import { digestHex } from './paths.js';
import { SingleFlight } from '../util/single-flight.js';

const DEFAULT_CHECKPOINT_BYTES = 64 * 1024 * 1024;
const MAX_DEFAULT_SETTLE_BYTES = 8 * 1024 * 1024;

export interface BlobStoreOptions {
  /** Store root; blobs live in `<root>/blobs/sha256/`. */
  root: string;
  /** Disk accounting shared with the chunk cache; default: unbounded (ENOSPC still handled). */
  budget?: DiskBudget;
  /**
   * Persist the coverage record after this many newly stored bytes. Default 64 MiB: each record
   * costs an fdatasync of the blob file on a thread-pool thread, and at 4 MiB a sequential model
   * read at loopback speed kept one thread syncing (same-run A/B, large image: cold read p50
   * 122 -> 146 MB/s). The background pass is held to `settleBytes` instead.
   */
  checkpointBytes?: number;
  /**
   * `LocalBlob.settle` (awaited by the background pass between units) records the coverage once
   * more than this many bytes are not on record, so a kill during the background fetch loses at
   * most this much. Default: 2 x checkpointBytes, at most 8 MiB.
   */
  settleBytes?: number;
  /** ... or this long after the first unrecorded write. Default 1000 ms. */
  checkpointMs?: number;
  /** fdatasync the data before recording it (power-loss safety). Default true. */
  durable?: boolean;
  logger?: Logger;
  /** Filesystem calls (tests inject failures). */
  fs?: BlobFs;
  /** Monotonic ms for the write rate that picks direct writes (tests inject one). */
  now?: () => number;
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
  /** @internal */ readonly settleBytes: number;
  /** @internal */ readonly durable: boolean;
  private readonly budget: DiskBudget | undefined;
  private readonly open = new Map<string, LocalBlob>();
  private readonly opening = new SingleFlight<string, LocalBlob>();
  /** Bytes accounted for blobs found on disk at start and not opened yet. */
  private readonly adopted = new Map<string, number>();
  private disabledReason: string | undefined;
  private closed = false;
  /** @internal */ readonly counters = { bytesWritten: 0, bytesRefused: 0, writeErrors: 0, checkpoints: 0 };
  /** @internal How fast compressed bytes are being stored (cache/write-rate.ts: direct writes). */
  readonly writeRate: WriteRate;
  /** Direct writes stay possible (the fs can open files so, and did not refuse them yet). */
  private directOk: boolean;

  private constructor(opts: BlobStoreOptions) {
    this.dir = rootLayout(opts.root).blobs;
    this.fs = opts.fs ?? nodeFs;
    this.logger = opts.logger ?? silentLogger;
    this.budget = opts.budget;
    this.writeRate = new WriteRate(opts.now ?? ((): number => performance.now()));
    this.directOk = this.fs.openDirect !== undefined;
    this.checkpointBytes = opts.checkpointBytes ?? DEFAULT_CHECKPOINT_BYTES;
    this.checkpointMs = opts.checkpointMs ?? 1000;
    this.settleBytes = opts.settleBytes ?? Math.min(2 * this.checkpointBytes, MAX_DEFAULT_SETTLE_BYTES);
    this.durable = opts.durable ?? true;
    for (const [k, v] of Object.entries({
      checkpointBytes: this.checkpointBytes,
      checkpointMs: this.checkpointMs,
      settleBytes: this.settleBytes,
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
    const blob = await this.opening.run(hex, () => this.load(hex, size));
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

  /**
   * @internal `written` bytes are about to be stored: should their page-aligned middle (`middle`
   * bytes) skip the page cache? Counts them into the rate either way (see LocalBlob.writeRange).
   */
  wantsDirect(written: number, middle: number): boolean {
    this.writeRate.add(written);
    return this.directOk && middle >= DIRECT_MIN_BYTES && this.writeRate.perSecond() >= DIRECT_MIN_RATE;
  }

  /** @internal The file system refused O_DIRECT: page-cache writes from now on, said once. */
  refuseDirect(err: unknown): void {
    if (!this.directOk) return;
    this.directOk = false;
    this.logger.info(
      { dir: this.dir, err },
      'blob store: file system refuses O_DIRECT, writes go through the page cache',
    );
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

function checkSize(blob: LocalBlob, size: number): void {
  if (blob.size !== size) {
    throw new StoreError('E_INVALID_ARGUMENT', 'blob opened with two different sizes', {
      digest: blob.digest,
      size,
      known: blob.size,
    });
  }
}
