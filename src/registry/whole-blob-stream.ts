import { StoreError, type ErrorContext } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { abortedError } from '../util/abort.js';

/**
 * Where the bytes of a whole-blob stream go as they pass: the lead connects this to the local
 * compressed-bytes store so a blob streamed once is never streamed again. Every byte is passed
 * once, in order, also the ones a waiting read took (that read keeps its own copy; the store then
 * holds the whole blob after one stream, so no later read needs the host again). The bytes are NOT
 * verified here (chunks are verified when they are read, as always). `buf` is only valid during
 * the call: copy what you keep.
 */
export interface PassingBytesSink {
  onPassingBytes(digest: string, offset: number, buf: Buffer): void;
  /**
   * Optional: bytes [offset, offset+length) of `digest` if the store holds them all (else
   * undefined). Asked for reads whose bytes already passed a live stream, before anything else.
   */
  readPassed?(digest: string, offset: number, length: number): Promise<Buffer | undefined>;
}

interface Waiter {
  start: number;
  end: number;
  buf: Buffer;
  resolve: (b: Buffer) => void;
  reject: (e: unknown) => void;
  cleanup: () => void;
}

export interface WholeBlobStreamOptions {
  sink?: PassingBytesSink;
  /** Abort the stream when no byte arrived for this long (default 60 s; Infinity = never). */
  idleTimeoutMs?: number;
  logger?: Logger;
  context?: ErrorContext;
}

/** A response body of the whole blob, and how to hang up on it. */
export interface BlobBody {
  body: AsyncIterable<Buffer>;
  abort(reason: unknown): void;
}

/**
 * One 200 response carrying the whole blob, consumed once from start to end. Every range read
 * whose bytes are still ahead of the stream waits here and is answered the moment its last byte
 * passes; every byte also goes to the sink. Memory is bounded by the waiting reads' own
 * buffers: the blob itself is never held. Reads behind the stream position get `undefined` from
 * `want` (the caller asks another host, the sink's store, or waits for `ended` and streams again).
 */
export class WholeBlobStream {
  /** Blob bytes [0, position) have passed. */
  position = 0;
  /** Body bytes received. */
  bytes = 0;
  private waiters: Waiter[] = [];
  private done = false;
  private failure: unknown;
  private abortBody?: (reason: unknown) => void;
  private idle?: ReturnType<typeof setTimeout>;
  private readonly logger: Logger;
  private readonly ctx: ErrorContext;
  private endResolve!: () => void;
  /** Settles (never rejects) when the stream has finished, failed or been abandoned. */
  readonly ended: Promise<void>;

  constructor(
    readonly digest: string,
    readonly size: number,
    private readonly o: WholeBlobStreamOptions = {},
  ) {
    this.logger = o.logger ?? silentLogger;
    this.ctx = { digest, ...o.context };
    this.ended = new Promise((r) => (this.endResolve = r));
  }

  get live(): boolean {
    return !this.done;
  }

  /** Number of reads waiting (tests, status). */
  get waiting(): number {
    return this.waiters.length;
  }

  /**
   * Wait for blob bytes [offset, offset+length). Undefined when they already passed (or the
   * stream is over): this stream cannot deliver them.
   */
  want(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> | undefined {
    if (this.done || offset < this.position) return undefined;
    if (signal?.aborted) return Promise.reject(abortedError(signal, this.ctx));
    if (length === 0) return Promise.resolve(Buffer.alloc(0));
    return new Promise<Buffer>((resolve, reject) => {
      const w: Waiter = {
        start: offset,
        end: offset + length,
        buf: Buffer.allocUnsafe(length),
        resolve,
        reject,
        cleanup: () => undefined,
      };
      if (signal) {
        const onAbort = () => {
          this.drop(w);
          reject(abortedError(signal, this.ctx));
        };
        signal.addEventListener('abort', onAbort, { once: true });
        w.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      this.waiters.push(w);
      this.waiters.sort((a, b) => a.start - b.start);
    });
  }

  /** Feed the stream from a response body (once). Runs until the blob end, a failure or abandonment. */
  run(src: BlobBody): void {
    if (this.done) {
      src.abort(new StoreError('E_ABORTED', 'whole-blob stream no longer wanted', this.ctx));
      return;
    }
    this.abortBody = (r) => src.abort(r);
    this.armIdle();
    void this.pump(src.body);
  }

  /** The response could not be obtained: fail every waiting read. */
  fail(err: unknown): void {
    this.finish(err);
  }

  private async pump(body: AsyncIterable<Buffer>): Promise<void> {
    try {
      for await (const chunk of body) {
        if (this.done) return;
        this.armIdle();
        this.bytes += chunk.length;
        if (this.position + chunk.length > this.size) {
          throw new StoreError(
            'E_REGISTRY_PROTOCOL',
            `whole-blob response runs past the blob size ${this.size}`,
            this.ctx,
          );
        }
        this.pass(chunk);
        if (this.done) return;
        if (this.waiters.length === 0 && !this.o.sink) {
          // nobody wants the rest and there is nowhere to put it: hang up
          this.finish(undefined, 'no reader left');
          return;
        }
      }
      if (this.position < this.size) {
        throw new StoreError(
          'E_TRUNCATED',
          `whole-blob response ended after ${this.position} of ${this.size} bytes`,
          { ...this.ctx, got: this.position, expected: this.size },
        );
      }
      this.finish();
    } catch (err) {
      this.finish(
        err instanceof StoreError
          ? err
          : new StoreError('E_REGISTRY_NETWORK', 'whole-blob response failed', this.ctx, { cause: err }),
      );
    }
  }

  /** Copy a chunk at `position` into every waiter it overlaps, and hand it to the sink. */
  private pass(chunk: Buffer): void {
    const from = this.position;
    const to = from + chunk.length;
    const finished: Waiter[] = [];
    for (const w of this.waiters) {
      if (w.start >= to) break;
      if (w.end <= from) continue;
      const s = Math.max(from, w.start);
      const e = Math.min(to, w.end);
      chunk.copy(w.buf, s - w.start, s - from, e - from);
      if (e === w.end) finished.push(w);
    }
    this.sink(chunk, from);
    this.position = to;
    for (const w of finished) {
      this.drop(w);
      w.resolve(w.buf);
    }
  }

  private sink(chunk: Buffer, offset: number): void {
    if (!this.o.sink) return;
    try {
      this.o.sink.onPassingBytes(this.digest, offset, chunk);
    } catch (err) {
      // the sink is an optimisation: its failure must not fail reads
      this.logger.warn({ ...this.ctx, err: (err as Error).message }, 'passing-bytes sink failed');
    }
  }

  private drop(w: Waiter): void {
    const i = this.waiters.indexOf(w);
    if (i >= 0) this.waiters.splice(i, 1);
    w.cleanup();
    if (this.waiters.length === 0 && !this.o.sink && this.abortBody && !this.done) {
      this.finish(undefined, 'no reader left');
    }
  }

  private armIdle(): void {
    const ms = this.o.idleTimeoutMs ?? 60_000;
    if (!Number.isFinite(ms)) return;
    if (this.idle) clearTimeout(this.idle);
    this.idle = setTimeout(() => {
      this.finish(
        new StoreError('E_DEADLINE', `whole-blob response stalled for ${ms} ms`, {
          ...this.ctx,
          position: this.position,
        }),
      );
    }, ms);
    this.idle.unref?.();
  }

  private finish(err?: unknown, why?: string): void {
    if (this.done) return;
    this.done = true;
    this.failure = err;
    if (this.idle) clearTimeout(this.idle);
    if (err !== undefined || why !== undefined || this.position < this.size) {
      this.abortBody?.(err ?? new StoreError('E_ABORTED', `whole-blob stream stopped: ${why}`, this.ctx));
    }
    const waiters = this.waiters;
    this.waiters = [];
    const reason =
      err ??
      new StoreError('E_TRUNCATED', `whole-blob stream stopped at byte ${this.position}`, {
        ...this.ctx,
        position: this.position,
      });
    for (const w of waiters) {
      w.cleanup();
      w.reject(reason);
    }
    if (err !== undefined) {
      this.logger.debug(
        { ...this.ctx, position: this.position, err: (err as Error).message },
        'whole-blob stream failed',
      );
    }
    this.endResolve();
  }

  /** Why it ended (undefined while live or after a clean end). */
  get error(): unknown {
    return this.failure;
  }
}

/**
 * The live whole-blob streams, one per (host, blob) at most: a second request to a host that
 * ignores Range would download the blob from byte 0 again.
 */
export class WholeBlobStreams {
  private readonly live = new Map<string, WholeBlobStream>();
  /** Streams started so far per `origin|digest` (tests, status). */
  readonly started = new Map<string, number>();

  constructor(private readonly o: Omit<WholeBlobStreamOptions, 'context'> = {}) {}

  get(origin: string, digest: string): WholeBlobStream | undefined {
    const s = this.live.get(`${origin}|${digest}`);
    return s?.live ? s : undefined;
  }

  /**
   * A new stream for (origin, digest). The caller feeds it with `run()` (or `fail()`). Throws
   * when one is live: callers check `get` first, synchronously.
   */
  create(origin: string, digest: string, size: number): WholeBlobStream {
    const key = `${origin}|${digest}`;
    if (this.get(origin, digest)) {
      throw new StoreError('E_IO', 'a whole-blob stream is already live for this host and blob', {
        host: origin,
        digest,
      });
    }
    const s = new WholeBlobStream(digest, size, { ...this.o, context: { host: origin } });
    this.live.set(key, s);
    this.started.set(key, (this.started.get(key) ?? 0) + 1);
    void s.ended.then(() => {
      if (this.live.get(key) === s) this.live.delete(key);
    });
    return s;
  }
}
