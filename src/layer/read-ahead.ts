/**
 * Read-ahead for sequential readers of one open file (a model shard read start to end).
 *
 * The kernel sends FUSE reads of at most 128 KiB (libfuse2 cannot negotiate larger requests) with
 * only a few in flight, so without help every chunk miss stalls the reader for a whole
 * fetch + inflate + verify. A `FileReadAhead` watches the offsets an open file is read at; once the
 * reader moves forward sequentially it loads the chunks ahead of it (`load`, i.e.
 * `LazyLayer.prefetchRange`: fetch + verify + cache, no bytes returned) in steps of `stepBytes`,
 * several steps in flight so that fetching the next span overlaps decoding and verifying the current
 * one on both cores (gzip inflates on libuv's thread pool). The distance kept ahead grows with the run (1 -> 4 -> 16 -> 64 MiB), so
 * a short sequential read never pulls 64 MiB it will not use. A random access or close() abandons
 * the run: no new steps start and the running ones are told to stop (their results, if any, still
 * land in the chunk cache, where they are verified bytes like any other).
 *
 * Memory: read-ahead owns no buffers. The bytes in flight (compressed spans being fetched, decoded
 * chunks on their way to the cache) are bounded per file by `maxInflightBytes` and per layer by a
 * shared `ReadAheadBudget`; finished chunks live in the chunk cache (disk + its bounded memory LRU).
 */

const MiB = 1024 * 1024;

export interface ReadAheadPolicy {
  /** Distances kept ahead of the reader, in growth order (bytes). */
  windows: readonly number[];
  /** Sequential bytes read before read-ahead starts (a small file read once needs none). */
  triggerBytes: number;
  /** Bytes one `load` call covers: the pipeline's unit. */
  stepBytes: number;
  /** Bytes of read-ahead in flight for one file at once (the memory window). */
  maxInflightBytes: number;
  /**
   * Reads landing this close to the reader's frontier (either side) still count as sequential:
   * the kernel's own read-ahead sends a few requests at once and they arrive out of order.
   */
  slackBytes: number;
  /**
   * Steps start before the running ones are done (their bytes still to arrive count, not their
   * whole length) only once a step's first byte has been seen to take at least this long. That
   * hides one round trip per batch of steps on a slow link (7-10 % of 100 Mbit/s at 30 ms); on a
   * fast one the round trip costs nothing and an earlier step would only decode beside the one
   * the reader waits for (start-up run phase 6-10 % slower on loopback, same run).
   */
  earlyStartRoundTripMs: number;
}

export const DEFAULT_READ_AHEAD: Readonly<ReadAheadPolicy> = Object.freeze({
  windows: Object.freeze([1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]),
  triggerBytes: 256 * 1024,
  stepBytes: 4 * MiB,
  maxInflightBytes: 12 * MiB,
  slackBytes: 1 * MiB,
  earlyStartRoundTripMs: 10,
});

/**
 * `policy` with its windows capped at half of `memoryBytes` (the chunk cache's memory LRU, where
 * chunks read ahead wait for the reader): a window larger than that would evict chunks before the
 * reader gets to them and make it read them back from disk.
 */
export function fitToMemory(policy: ReadAheadPolicy, memoryBytes: number): ReadAheadPolicy {
  if (!(memoryBytes > 0)) return policy;
  const cap = Math.max(policy.stepBytes, Math.floor(memoryBytes / 2));
  const windows = policy.windows.filter((w) => w <= cap);
  if (windows.length < policy.windows.length && windows[windows.length - 1] !== cap) windows.push(cap);
  return { ...policy, windows, maxInflightBytes: Math.min(policy.maxInflightBytes, cap) };
}

export interface WindowState {
  /** Current distance kept ahead of the reader (0: no read-ahead yet). */
  window: number;
  /** Length of the current sequential run (bytes from its start to the frontier). */
  runBytes: number;
}

/**
 * The window for the next read of a run (pure). Starts at `windows[0]` once the run reaches
 * `triggerBytes`; moves up one size each time the reader has consumed at least the current window
 * (so read-ahead proved useful at that size); never shrinks within a run.
 */
export function nextWindow(state: WindowState, policy: ReadAheadPolicy = DEFAULT_READ_AHEAD): number {
  const sizes = policy.windows;
  if (sizes.length === 0) return 0;
  if (state.window <= 0) return state.runBytes >= policy.triggerBytes ? sizes[0]! : 0;
  if (state.runBytes < state.window) return state.window;
  for (const s of sizes) if (s > state.window) return s;
  return state.window;
}

/**
 * Loads (fetch + verify + cache) file bytes [offset, offset+length); resolves when done. It may
 * report `progress`: the share (0..1) of the step's compressed bytes received so far.
 */
export type RangeLoad = (
  offset: number,
  length: number,
  signal: AbortSignal,
  progress: (fraction: number) => void,
) => Promise<void>;

/**
 * Bytes of read-ahead in flight across all open files of one layer (or store). Files that find it
 * exhausted wait for a `release` (they are called back, no polling).
 */
export class ReadAheadBudget {
  private used = 0;
  private readonly waiting = new Set<() => void>();

  constructor(readonly maxBytes: number) {}

  get inUse(): number {
    return this.used;
  }

  /** Take `n` bytes if they fit (a single step larger than the whole budget fits an empty budget). */
  tryTake(n: number): boolean {
    if (this.used > 0 && this.used + n > this.maxBytes) return false;
    this.used += n;
    return true;
  }

  release(n: number): void {
    this.used = Math.max(0, this.used - n);
    const w = [...this.waiting];
    this.waiting.clear();
    for (const fn of w) fn();
  }

  /** Call `fn` once at the next release. */
  onRelease(fn: () => void): void {
    this.waiting.add(fn);
  }

  forget(fn: () => void): void {
    this.waiting.delete(fn);
  }
}

export interface FileReadAheadOptions {
  policy?: Partial<ReadAheadPolicy>;
  /** Shared bound with the other open files of the layer. */
  budget?: ReadAheadBudget;
  /** Told about a failed step (read-ahead never surfaces errors: the reader's own read does). */
  onError?: (err: unknown) => void;
  /**
   * End of the chunk holding file offset `offset`: steps are rounded up to chunk ends so that
   * consecutive steps never split (and account twice for) one chunk.
   */
  chunkEnd?: (offset: number) => number;
  /** Milliseconds on a monotonic clock (tests inject one). Default performance.now. */
  now?: () => number;
}

export interface ReadAheadStats {
  window: number;
  runBytes: number;
  /** Steps started / finished (either way) since open. */
  started: number;
  settled: number;
  failed: number;
  inflightBytes: number;
  /** Of those, the bytes whose compressed data has not arrived yet (as the steps' progress says). */
  inflightRemainingBytes: number;
  /** File offset up to which read-ahead has been requested. */
  issuedEnd: number;
  /** Largest `inflightBytes` seen (the memory bound, for tests). */
  peakInflightBytes: number;
  /**
   * Time to the first byte of a step (ms), the largest recent one (decaying by a quarter a step);
   * -1 before any.
   */
  roundTripMs: number;
}

interface Step {
  offset: number;
  length: number;
  /** Bytes of the step whose compressed data has not arrived yet (as far as progress says). */
  remaining: number;
  done: Promise<void>;
}

export class FileReadAhead {
  private readonly policy: ReadAheadPolicy;
  private readonly budget: ReadAheadBudget | undefined;
  private window = 0;
  private runStart = -1;
  /** End of the chunk the run started in (see onRead). */
  private runChunkEnd = 0;
  private frontier = -1;
  private issuedEnd = 0;
  private run = new AbortController();
  private readonly inflight = new Set<Step>();
  private inflightBytes = 0;
  /** Sum of the in-flight steps' `remaining`. */
  private inflightRemaining = 0;
  private peakInflightBytes = 0;
  /** See ReadAheadStats.roundTripMs. */
  private roundTripMs = -1;
  private readonly now: () => number;
  private started = 0;
  private settled = 0;
  private failed = 0;
  private closed = false;
  private waitingBudget = false;
  private readonly wake = (): void => {
    this.waitingBudget = false;
    this.pump();
  };
  private idleWaiters: Array<() => void> = [];

  constructor(
    /** File size: nothing is read ahead past it. */
    private readonly size: number,
    private readonly load: RangeLoad,
    private readonly opts: FileReadAheadOptions = {},
  ) {
    this.policy = { ...DEFAULT_READ_AHEAD, ...opts.policy };
    this.budget = opts.budget;
    this.now = opts.now ?? ((): number => performance.now());
  }

  /** Tell the read-ahead about a read the application makes; starts or extends work at once. */
  onRead(offset: number, length: number): void {
    if (this.closed || !(length > 0) || !(offset >= 0)) return;
    const end = Math.min(this.size, offset + length);
    const slack = this.policy.slackBytes;
    const sequential =
      this.frontier >= 0 &&
      offset >= this.runStart &&
      offset <= this.frontier + slack &&
      end >= this.frontier - slack;
    if (!sequential) {
      this.restart(offset, end);
    } else if (end > this.frontier) {
      this.frontier = end;
    }
    // Nothing is loaded ahead before the reader has consumed the chunk its run started in: that
    // chunk is fetched whole anyway, and a reader stopping inside it (a 2.6 MiB model header read
    // at start-up, eStargz chunks of 4 MiB) would otherwise pull the next chunk for nothing.
    if (this.window === 0 && this.frontier < this.runChunkEnd) return;
    const state = { window: this.window, runBytes: this.frontier - this.runStart };
    // a large read can cross several sizes at once
    for (let i = 0; i <= this.policy.windows.length; i++) {
      const w = nextWindow(state, this.policy);
      if (w === state.window) break;
      state.window = w;
    }
    this.window = state.window;
    this.pump();
  }

  /** Abandon everything: no new steps; running steps are signalled to stop. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.run.abort();
    if (this.waitingBudget) this.budget?.forget(this.wake);
    this.waitingBudget = false;
  }

  /** Resolves when no step is in flight (tests; shutdown). */
  idle(): Promise<void> {
    if (this.inflight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  stats(): ReadAheadStats {
    return {
      window: this.window,
      runBytes: this.frontier >= 0 ? this.frontier - this.runStart : 0,
      started: this.started,
      settled: this.settled,
      failed: this.failed,
      inflightBytes: this.inflightBytes,
      inflightRemainingBytes: this.inflightRemaining,
      issuedEnd: this.issuedEnd,
      peakInflightBytes: this.peakInflightBytes,
      roundTripMs: this.roundTripMs,
    };
  }

  /** A new run at `offset`: the old run's steps are told to stop and nothing is read ahead yet. */
  private restart(offset: number, end: number): void {
    if (this.frontier >= 0) {
      this.run.abort();
      this.run = new AbortController();
    }
    this.runStart = offset;
    const chunkEnd = this.opts.chunkEnd?.(offset);
    this.runChunkEnd = chunkEnd !== undefined && Number.isSafeInteger(chunkEnd) ? chunkEnd : offset;
    this.frontier = end;
    this.window = 0;
    this.issuedEnd = end;
  }

  /** Start steps until the window ahead of the frontier is covered or a memory bound is reached. */
  private pump(): void {
    if (this.closed || this.window === 0) return;
    const target = Math.min(this.size, this.frontier + this.window);
    // the reader overtook the read-ahead: never load what it already asked for itself
    if (this.issuedEnd < this.frontier) this.issuedEnd = this.frontier;
    while (this.issuedEnd < target) {
      const length = this.stepLength(this.issuedEnd, target);
      // On a slow link the bound counts the steps' bytes still to arrive, so the next request
      // starts while the last ones are still transferring: steps started together share the link
      // and end together, and waiting for all of them left the link idle for a round trip each
      // time. Bytes received but not yet decoded and cached still take memory: at most one step
      // more than the bound is ever in flight. See ReadAheadPolicy.earlyStartRoundTripMs.
      if (this.inflightBytes > 0) {
        if (this.roundTripMs >= this.policy.earlyStartRoundTripMs) {
          if (this.inflightRemaining + length > this.policy.maxInflightBytes) return;
          if (this.inflightBytes + length > this.policy.maxInflightBytes + this.policy.stepBytes) return;
        } else if (this.inflightBytes + length > this.policy.maxInflightBytes) return;
      }
      if (this.budget !== undefined && !this.budget.tryTake(length)) {
        if (!this.waitingBudget) {
          this.waitingBudget = true;
          this.budget.onRelease(this.wake);
        }
        return;
      }
      this.startStep(this.issuedEnd, length);
      this.issuedEnd += length;
    }
  }

  private stepLength(from: number, target: number): number {
    let end = Math.min(target, from + this.policy.stepBytes);
    const chunkEnd = this.opts.chunkEnd;
    if (chunkEnd !== undefined) {
      const aligned = chunkEnd(end - 1);
      // a bogus answer (not past `end - 1`) falls back to the unaligned step
      if (Number.isSafeInteger(aligned) && aligned >= end) end = aligned;
    }
    return Math.max(1, Math.min(this.size, end) - from);
  }

  private startStep(offset: number, length: number): void {
    const signal = this.run.signal;
    this.inflightBytes += length;
    this.inflightRemaining += length;
    this.peakInflightBytes = Math.max(this.peakInflightBytes, this.inflightBytes);
    this.started++;
    const step: Step = { offset, length, remaining: length, done: Promise.resolve() };
    const startedAt = this.now();
    const progress = (fraction: number): void => {
      if (!this.inflight.has(step) || !(fraction > 0)) return;
      // a step whose bytes were local or already on their way answers at once: a slow link is
      // forgotten over a few such steps, not at the first
      if (step.remaining === length) {
        this.roundTripMs = Math.max(this.now() - startedAt, this.roundTripMs * 0.75);
      }
      const remaining = Math.max(0, Math.round(length * (1 - Math.min(1, fraction))));
      if (remaining >= step.remaining) return;
      this.inflightRemaining -= step.remaining - remaining;
      step.remaining = remaining;
      this.pump();
    };
    this.inflight.add(step);
    let work: Promise<void>;
    try {
      work = this.load(offset, length, signal, progress);
    } catch (err) {
      work = Promise.reject(err);
    }
    step.done = work.then(
      () => undefined,
      (err: unknown) => {
        // an abandoned run's failures are expected (aborted), not worth reporting
        if (signal.aborted) return;
        this.failed++;
        try {
          this.opts.onError?.(err);
        } catch {
          // a failing reporter must not turn into an unhandled rejection
        }
      },
    );
    void step.done.then(() => {
      this.inflight.delete(step);
      this.inflightBytes -= length;
      this.inflightRemaining -= step.remaining;
      this.settled++;
      this.budget?.release(length);
      if (this.inflight.size === 0) {
        const w = this.idleWaiters;
        this.idleWaiters = [];
        for (const fn of w) fn();
      }
      this.pump();
    });
  }
}

/**
 * `chunkEnd` for a file whose chunks are sorted by file offset (TOC order): the end of the chunk
 * holding an offset, found by binary search; past the last chunk, the offset itself + 1.
 */
export function chunkEndOf(
  chunks: ReadonlyArray<{ fileOffset: number; size: number }>,
): (offset: number) => number {
  return (offset) => {
    let lo = 0;
    let hi = chunks.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const c = chunks[mid]!;
      if (offset < c.fileOffset) hi = mid - 1;
      else if (offset >= c.fileOffset + c.size) lo = mid + 1;
      else return c.fileOffset + c.size;
    }
    return offset + 1;
  };
}
