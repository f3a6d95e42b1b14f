import { systemClock, type Clock } from '../util/clock.js';

export interface SchedulerOptions {
  /** Background tasks running at once, across all layers sharing this scheduler. Default 2. */
  backgroundConcurrency?: number;
  /**
   * Background work waits this long after the last on-demand fetch ended (store-wide), and a
   * layer's background pass this long after the layer's last read. Default 2000 ms.
   */
  quietMs?: number;
  /**
   * Background network bytes per second, store-wide (token bucket; 0 = unlimited). Default
   * 32 MiB/s: the decompression and hashing behind it then stay well below one core.
   */
  bandwidthBytesPerSec?: number;
  /** Time source (tests inject a ManualClock). Default: performance.now() and real timers. */
  clock?: Clock;
  /**
   * Background CPU steps (chunk decodes) running at once. Default 1, which leaves the other core
   * free for on-demand reads.
   */
  backgroundCpuConcurrency?: number;
  /**
   * Whole-layer DiffID passes hashing at once, across all layers (each holds a decompressor and a
   * running hash for its whole pass). Default 2 (a pass
   * holds its slot while its layer is being read, so one slot could starve the other layers).
   */
  hashConcurrency?: number;
}

export interface SchedulerStats {
  foregroundInFlight: number;
  backgroundRunning: number;
  backgroundWaiting: number;
  preemptions: number;
  /** DiffID passes holding a hash slot / waiting for one. */
  hashRunning: number;
  hashWaiting: number;
}

/** Abort reason used when on-demand work takes the network back from a background task. */
export class Preempted extends Error {
  constructor() {
    super('background fetch preempted by an on-demand read');
    this.name = 'Preempted';
  }
}

/**
 * Two-level priority for network work. On-demand fetches (FUSE reads, prefetch) always run at
 * once. Background tasks run only while no on-demand fetch is in flight and none ended within the
 * quiet period, at most `backgroundConcurrency` at a time; an on-demand fetch that starts aborts
 * the running background tasks' signals, and those tasks are re-run later. One scheduler should
 * be shared by all layers of a store so priority holds across layers.
 */
export class FetchScheduler {
  private readonly concurrency: number;
  readonly quietMs: number;
  readonly clock: Clock;
  private readonly bandwidth: number;
  /** Pacing: the clock time from which the next background bytes may start. */
  private nextSendAt = 0;
  private foregroundCount = 0;
  private lastForegroundEnd = 0;
  private readonly running = new Set<AbortController>();
  private waiters: Array<() => void> = [];
  private timerArmed = false;
  private preemptions = 0;
  private everForeground = false;
  /** On-demand fetches in flight (foregroundCount also counts prefetch batches). */
  private onDemandCount = 0;
  private readonly cpuConcurrency: number;
  private cpuRunning = 0;
  private readonly hashConcurrency: number;
  private hashRunning = 0;
  private hashWaiting = 0;

  constructor(opts: SchedulerOptions = {}) {
    this.concurrency = Math.max(1, opts.backgroundConcurrency ?? 2);
    this.quietMs = Math.max(0, opts.quietMs ?? 2000);
    this.clock = opts.clock ?? systemClock;
    this.bandwidth = Math.max(0, opts.bandwidthBytesPerSec ?? 32 * 1024 * 1024);
    this.cpuConcurrency = Math.max(1, opts.backgroundCpuConcurrency ?? 1);
    this.hashConcurrency = Math.max(1, opts.hashConcurrency ?? 2);
  }

  /**
   * Run a whole hashing pass (`fn`) once one of the store-wide hash slots is free, so the memory and
   * CPU of DiffID passes stay bounded however many layers are mounted.
   */
  async withHashSlot<T>(fn: () => Promise<T>, cancel?: AbortSignal): Promise<T> {
    this.hashWaiting++;
    try {
      // check and claim in the same tick, like acquire()
      while (this.hashRunning >= this.hashConcurrency) {
        await this.waitUntil(() => this.hashRunning < this.hashConcurrency, cancel);
      }
      if (cancel?.aborted) throw cancel.reason;
    } finally {
      this.hashWaiting--;
    }
    this.hashRunning++;
    try {
      return await fn();
    } finally {
      this.hashRunning--;
      this.wake();
    }
  }

  /**
   * Run one CPU-heavy background step (a chunk decode): waits until no on-demand work is in
   * flight and the quiet period passed, and a CPU slot is free.
   */
  async backgroundCpu<T>(fn: () => Promise<T>, cancel?: AbortSignal): Promise<T> {
    const ready = (): boolean =>
      this.foregroundCount === 0 && this.quietLeft() <= 0 && this.cpuRunning < this.cpuConcurrency;
    while (!ready()) await this.waitUntil(ready, cancel);
    this.cpuRunning++;
    try {
      return await fn();
    } finally {
      this.cpuRunning--;
      this.wake();
    }
  }

  /**
   * Run an on-demand fetch now; running background tasks are preempted, unless `preempt` is false:
   * work that needs no network (chunks decoded from compressed bytes held locally) would only make
   * them give up requests in flight and ask for those bytes again. Background CPU steps wait for it
   * either way.
   */
  async foreground<T>(fn: () => Promise<T>, preempt = true): Promise<T> {
    return await this.onDemand(() => this.claimForeground(fn, preempt));
  }

  /**
   * Read-ahead: fetched like an on-demand read (preempting background work), but speculative, so
   * it does not hold the prefetch tier back; a reader that catches up with it waits through
   * onDemand() and holds prefetch back then. Prefetch waiting behind every read-ahead step kept
   * a container's start-up prefetch back while its entrypoint read one file sequentially.
   */
  async readAhead<T>(fn: () => Promise<T>, preempt = true): Promise<T> {
    return await this.claimForeground(fn, preempt);
  }

  /**
   * A reader waits for `fn` (a read, whether it fetches, joins a fetch in flight, or reads the
   * cache): prefetch batches do not start meanwhile. Counts nothing else.
   */
  async onDemand<T>(fn: () => Promise<T>): Promise<T> {
    this.onDemandCount++;
    try {
      return await fn();
    } finally {
      this.onDemandCount--;
      this.wake();
    }
  }

  /**
   * The prefetch tier: above background (which it preempts and holds back), below on-demand
   * reads: a prefetch batch starts only while no on-demand fetch is in flight. A running batch is
   * not aborted (its bytes are wanted soon, and on-demand reads of the same span join it).
   */
  async prefetch<T>(fn: () => Promise<T>, cancel?: AbortSignal): Promise<T> {
    while (this.onDemandCount > 0) await this.waitUntil(() => this.onDemandCount === 0, cancel);
    return await this.claimForeground(fn);
  }

  private async claimForeground<T>(fn: () => Promise<T>, preempt = true): Promise<T> {
    this.foregroundCount++;
    this.everForeground = true;
    if (preempt) for (const ac of this.running) ac.abort(new Preempted());
    try {
      return await fn();
    } finally {
      this.foregroundCount--;
      this.lastForegroundEnd = this.clock.now();
      this.wake();
    }
  }

  /**
   * Run `fn` at background priority. `fn` must be safe to re-run: if its signal is aborted with
   * Preempted and it rejects, it is queued again. `cancel` aborts waiting and running for good.
   */
  async background<T>(fn: (signal: AbortSignal) => Promise<T>, cancel?: AbortSignal): Promise<T> {
    for (;;) {
      const ac = new AbortController();
      await this.acquire(ac, cancel);
      const onCancel = (): void => ac.abort(cancel?.reason);
      cancel?.addEventListener('abort', onCancel, { once: true });
      try {
        return await fn(ac.signal);
      } catch (err) {
        if (ac.signal.reason instanceof Preempted && !cancel?.aborted) {
          this.preemptions++;
          continue;
        }
        throw err;
      } finally {
        cancel?.removeEventListener('abort', onCancel);
        this.running.delete(ac);
        this.wake();
      }
    }
  }

  stats(): SchedulerStats {
    return {
      foregroundInFlight: this.foregroundCount,
      backgroundRunning: this.running.size,
      backgroundWaiting: this.waiters.length,
      preemptions: this.preemptions,
      hashRunning: this.hashRunning,
      hashWaiting: this.hashWaiting,
    };
  }

  private quietLeft(): number {
    // nothing ended yet: no quiet period to wait for
    if (!this.everForeground) return 0;
    return this.lastForegroundEnd + this.quietMs - this.clock.now();
  }

  private canStart(): boolean {
    return this.foregroundCount === 0 && this.running.size < this.concurrency && this.quietLeft() <= 0;
  }

  /** Wait for a slot and claim it synchronously (adds `ac` to running) so no other task races in. */
  private async acquire(ac: AbortController, cancel?: AbortSignal): Promise<void> {
    // The check and the claim must happen in the same tick: `await waitUntil()` would resume a
    // microtask later, after other tasks saw the same free slot.
    while (!this.canStart()) await this.waitUntil(() => this.canStart(), cancel);
    if (cancel?.aborted) throw cancel.reason;
    this.running.add(ac);
  }

  /**
   * Resolves once no on-demand work is in flight and the quiet period has passed. Background
   * tasks call it between CPU-heavy steps (each chunk decode, each piece hashed) so that work
   * already fetched does not compete with on-demand reads for the CPU either.
   */
  async idle(cancel?: AbortSignal): Promise<void> {
    await this.waitUntil(() => this.foregroundCount === 0 && this.quietLeft() <= 0, cancel);
  }

  private async waitUntil(ready: () => boolean, cancel?: AbortSignal): Promise<void> {
    while (!ready()) {
      if (cancel?.aborted) throw cancel.reason;
      await new Promise<void>((resolve, reject) => {
        const onCancel = (): void => reject(cancel?.reason);
        cancel?.addEventListener('abort', onCancel, { once: true });
        this.waiters.push(() => {
          cancel?.removeEventListener('abort', onCancel);
          resolve();
        });
        this.armTimer();
      });
    }
    if (cancel?.aborted) throw cancel.reason;
  }

  /** Wake waiters when the quiet period ends (nothing else would). */
  private armTimer(): void {
    if (this.timerArmed || this.foregroundCount > 0) return;
    const left = this.quietLeft();
    if (left <= 0) return;
    this.timerArmed = true;
    void this.clock.sleep(left).then(() => {
      this.timerArmed = false;
      this.wake();
    });
  }

  /**
   * Background bytes pacing (token bucket without burst): resolves when `bytes` more may be
   * fetched under the store-wide bandwidth bound. Time is the injected clock's.
   */
  async takeBandwidth(bytes: number, cancel?: AbortSignal): Promise<void> {
    if (this.bandwidth <= 0 || bytes <= 0) return;
    const now = this.clock.now();
    const start = Math.max(now, this.nextSendAt);
    this.nextSendAt = start + (bytes * 1000) / this.bandwidth;
    if (start > now) await this.clock.sleep(start - now, cancel);
  }

  /**
   * Resolves once `lastRead()` (a layer's last on-demand read, clock time; undefined: none yet)
   * lies `quietMs` in the past: a layer's background pass yields while its files are being read.
   */
  async layerQuiet(lastRead: () => number | undefined, cancel?: AbortSignal): Promise<void> {
    for (;;) {
      if (cancel?.aborted) throw cancel.reason;
      const last = lastRead();
      if (last === undefined) return;
      const left = last + this.quietMs - this.clock.now();
      if (left <= 0) return;
      await this.clock.sleep(left, cancel);
    }
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const fn of w) fn();
    if (this.waiters.length > 0) this.armTimer();
  }
}
