import { open } from 'node:fs/promises';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';

/**
 * `[debug] record_accesses` / `--record-accesses FILE`: which files of a layer's `diff` a container
 * used, as JSON lines appended to a file. Each (ref, ALS digest, path) is written once, at its first
 * open (or first readlink); the distinct bytes read from it follow in `read` lines when a handle is
 * released (the last such line of a path holds its total). Used to build access profiles for the
 * optimised eStargz (the `--prioritize` list) from what the store really served.
 *
 * Serving never waits for the disk: lines are queued and written in batches by one asynchronous
 * writer; when more than `maxPending` lines wait, new ones are dropped and counted (a `dropped` line
 * and a warning say so at close). `close()` writes everything still queued.
 */

/** One node of a layer, as the client addressed it. */
export interface AccessTarget {
  ref: string;
  /** The ALS directory name: the blob digest (OLD clients) or the TOC digest (NEW clients). */
  digest: string;
  /** The TOC digest the layer was verified against. */
  tocDigest: string;
  /** Path inside the layer, no leading slash. */
  path: string;
  /** Regular file: its size; symlink: the byte length of its target. */
  size: number;
}

/** The lines of the file (one JSON object each). */
export type AccessLine =
  | ({ time: string; event: 'open' | 'readlink' } & AccessTarget)
  | ({ time: string; event: 'read'; bytesRead: number; approximate?: true } & AccessTarget)
  | { time: string; event: 'dropped'; count: number };

/** Where lines go: a file in production, anything in tests. */
export interface AccessSink {
  write(data: Buffer): Promise<void>;
  close(): Promise<void>;
}

export interface AccessLogOptions {
  logger?: Logger;
  /** Most lines queued for the writer; beyond it lines are dropped and counted (default 10 000). */
  maxPending?: number;
  /** Start a write as soon as this many lines are queued (default 256)... */
  batchLines?: number;
  /** ...or this long after the first queued line (default 200 ms). */
  flushMs?: number;
  /** Intervals kept per file to count distinct bytes read; beyond it the closest merge (default 256). */
  maxIntervals?: number;
  /** Clock (tests). */
  now?: () => Date;
}

export interface AccessLogStats {
  /** Lines produced (written + dropped + still queued). */
  recorded: number;
  written: number;
  dropped: number;
  writeErrors: number;
  pending: number;
}

/** What the read path of one open file reports; shared by every handle of that file. */
export interface ReadTracker {
  /** Bytes [offset, offset+length) were served. */
  read(offset: number, length: number): void;
  /** A handle was released: write the distinct bytes read so far if they grew. */
  release(): void;
}

/**
 * Distinct byte ranges, sorted and merged. Bounded: past `max` intervals the two separated by the
 * smallest gap are joined, which can only over-count (then `approximate` is set).
 */
export class ByteCoverage {
  private readonly iv: Array<[number, number]> = [];
  total = 0;
  approximate = false;

  constructor(private readonly max = 256) {}

  add(start: number, end: number): void {
    if (!(end > start)) return;
    const iv = this.iv;
    // first interval that ends at or after `start` (touching intervals merge)
    let lo = 0;
    let hi = iv.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (iv[mid]![1] < start) lo = mid + 1;
      else hi = mid;
    }
    let s = start;
    let e = end;
    let j = lo;
    let removed = 0;
    while (j < iv.length && iv[j]![0] <= end) {
      s = Math.min(s, iv[j]![0]);
      e = Math.max(e, iv[j]![1]);
      removed += iv[j]![1] - iv[j]![0];
      j++;
    }
    iv.splice(lo, j - lo, [s, e]);
    this.total += e - s - removed;
    if (iv.length > this.max) this.mergeClosest();
  }

  private mergeClosest(): void {
    const iv = this.iv;
    let best = 0;
    for (let k = 1; k + 1 < iv.length; k++) {
      if (iv[k + 1]![0] - iv[k]![1] < iv[best + 1]![0] - iv[best]![1]) best = k;
    }
    this.total += iv[best + 1]![0] - iv[best]![1];
    iv.splice(best, 2, [iv[best]![0], iv[best + 1]![1]]);
    this.approximate = true;
  }

  get intervals(): number {
    return this.iv.length;
  }
}

class FileTracker implements ReadTracker {
  readonly coverage: ByteCoverage;
  /** Total at the last `read` line (0 = none written). */
  reported = 0;

  constructor(
    private readonly log: AccessLog,
    readonly target: AccessTarget,
    maxIntervals: number,
  ) {
    this.coverage = new ByteCoverage(maxIntervals);
  }

  read(offset: number, length: number): void {
    this.coverage.add(offset, offset + length);
  }

  release(): void {
    this.log.reportReads(this);
  }
}

const keyOf = (t: AccessTarget) => `${t.ref}\n${t.digest}\n${t.path}`;

export class AccessLog {
  private readonly files = new Map<string, FileTracker>();
  private readonly links = new Set<string>();
  private pending: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;
  private readonly st = { recorded: 0, written: 0, dropped: 0, writeErrors: 0 };
  private readonly log: Logger;
  private readonly maxPending: number;
  private readonly batchLines: number;
  private readonly flushMs: number;
  private readonly maxIntervals: number;
  private readonly now: () => Date;

  constructor(
    private readonly sink: AccessSink,
    opts: AccessLogOptions = {},
  ) {
    this.log = opts.logger ?? silentLogger;
    this.maxPending = Math.max(1, opts.maxPending ?? 10_000);
    this.batchLines = Math.max(1, opts.batchLines ?? 256);
    this.flushMs = Math.max(0, opts.flushMs ?? 200);
    this.maxIntervals = Math.max(2, opts.maxIntervals ?? 256);
    this.now = opts.now ?? (() => new Date());
  }

  /** Append to `path` (created 0644 if missing). Fails at once (E_CONFIG) when the file cannot be opened. */
  static async toFile(path: string, opts: AccessLogOptions = {}): Promise<AccessLog> {
    let fh;
    try {
      fh = await open(path, 'a', 0o644);
    } catch (err) {
      throw new StoreError(
        'E_CONFIG',
        `cannot open the access record file ${path}: ${(err as Error).message}`,
        { path, key: 'record_accesses' },
        { cause: err },
      );
    }
    const h = fh;
    const sink: AccessSink = {
      async write(data) {
        // a regular file takes the whole buffer, but a short write must not lose the tail
        let off = 0;
        while (off < data.length) off += (await h.write(data, off, data.length - off)).bytesWritten;
      },
      close: () => h.close(),
    };
    const log = new AccessLog(sink, opts);
    (opts.logger ?? silentLogger).info({ path }, 'recording file accesses of layer diffs');
    return log;
  }

  /** A regular file of a diff was opened. Returns the tracker its reads report to (undefined once closed). */
  opened(t: AccessTarget): ReadTracker | undefined {
    if (this.closed) return undefined;
    const key = keyOf(t);
    let f = this.files.get(key);
    if (!f) {
      f = new FileTracker(this, { ...t }, this.maxIntervals);
      this.files.set(key, f);
      this.enqueue({ time: this.now().toISOString(), event: 'open', ...t });
    }
    return f;
  }

  /** A symlink of a diff was read. */
  readlinked(t: AccessTarget): void {
    if (this.closed) return;
    const key = keyOf(t);
    if (this.links.has(key)) return;
    this.links.add(key);
    this.enqueue({ time: this.now().toISOString(), event: 'readlink', ...t });
  }

  /** @internal FileTracker.release */
  reportReads(f: FileTracker): void {
    if (this.closed || f.coverage.total === f.reported) return;
    f.reported = f.coverage.total;
    const line: Extract<AccessLine, { event: 'read' }> = {
      time: this.now().toISOString(),
      event: 'read',
      ...f.target,
      bytesRead: f.coverage.total,
    };
    if (f.coverage.approximate) line.approximate = true;
    this.enqueue(line);
  }

  stats(): AccessLogStats {
    return { ...this.st, pending: this.pending.length };
  }

  private enqueue(line: AccessLine): void {
    this.st.recorded++;
    if (this.pending.length >= this.maxPending) {
      if (this.st.dropped === 0) {
        this.log.warn(
          { maxPending: this.maxPending },
          'access recording falls behind: dropping lines (counted; see the dropped line at shutdown)',
        );
      }
      this.st.dropped++;
      return;
    }
    this.pending.push(JSON.stringify(line) + '\n');
    if (this.pending.length >= this.batchLines) this.kick();
    else this.timer ??= setTimeout(() => this.kick(), this.flushMs).unref();
  }

  /** Start the writer unless it runs (it picks up whatever is queued when its write ends). */
  private kick(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.writing || this.pending.length === 0) return;
    this.writing = this.drain().finally(() => {
      this.writing = undefined;
    });
  }

  private async drain(): Promise<void> {
    while (this.pending.length > 0) {
      const batch = this.pending;
      this.pending = [];
      try {
        await this.sink.write(Buffer.from(batch.join(''), 'utf8'));
        this.st.written += batch.length;
      } catch (err) {
        this.st.writeErrors++;
        this.st.dropped += batch.length;
        if (this.st.writeErrors === 1) this.log.warn({ err }, 'cannot write the access record file');
      }
    }
  }

  /** Everything queued so far is written when this resolves. */
  async flush(): Promise<void> {
    this.kick();
    while (this.writing) {
      await this.writing;
      this.kick();
    }
  }

  /**
   * Stop recording (later events are ignored), write the byte counts of handles still open, a
   * `dropped` line if anything was lost, and close the file.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const f of this.files.values()) this.reportReads(f);
      this.closed = true;
      await this.flush();
      if (this.st.dropped > 0) {
        const line: AccessLine = { time: this.now().toISOString(), event: 'dropped', count: this.st.dropped };
        await this.sink.write(Buffer.from(JSON.stringify(line) + '\n')).catch(() => undefined);
        this.log.warn({ ...this.stats() }, 'access recording lost lines');
      }
      await this.sink
        .close()
        .catch((err: unknown) => this.log.warn({ err }, 'closing the access record file'));
      this.log.info({ ...this.stats() }, 'access recording closed');
    })();
    return this.closing;
  }
}
