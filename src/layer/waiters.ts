/**
 * Who still waits for one piece of shared work (a chunk being fetched). A waiter either waits for
 * good (a caller without a signal) or may give up (its read's deadline or interrupt, a closed
 * file). When the last waiter gave up and nobody waits for good, `abandoned` aborts: the work's
 * registry request stops (it may be stuck on a hung registry, holding a connection until its
 * timeout), and later callers start afresh instead of joining it.
 */
export class Waiters {
  private readonly ctl = new AbortController();
  private count = 0;
  private forGood = false;
  private callers = 0;

  /** `onAbandoned`: called once, synchronously, when the last waiter gave up. */
  constructor(private readonly onAbandoned?: () => void) {}

  get abandoned(): AbortSignal {
    return this.ctl.signal;
  }

  /**
   * Did more than one caller ever wait (for good or not, given up or not)? The work's result is
   * then possibly in several hands, and only the garbage collector may free it.
   */
  get shared(): boolean {
    return this.callers > 1;
  }

  /** A waiter that cannot give up: the work is never abandoned. */
  addForGood(): void {
    this.callers++;
    this.forGood = true;
  }

  /** One more waiter; call the returned function when it gives up (extra calls are ignored). */
  join(): (reason?: unknown) => void {
    this.callers++;
    this.count++;
    let left = false;
    return (reason) => {
      if (left) return;
      left = true;
      this.count--;
      if (this.forGood || this.count > 0 || this.ctl.signal.aborted) return;
      this.ctl.abort(reason);
      this.onAbandoned?.();
    };
  }
}

/**
 * One caller's interest in several pieces of work (a read's chunks): one listener on its signal
 * however many chunks it waits for (a prefetch may wait for thousands). Without a signal the
 * caller waits for good.
 */
export class Interest {
  private readonly leaves: Array<(reason?: unknown) => void> = [];
  private readonly onAbort = (): void => {
    for (const leave of this.leaves.splice(0)) leave(this.signal!.reason);
  };

  constructor(private readonly signal: AbortSignal | undefined) {
    if (signal !== undefined && !signal.aborted)
      signal.addEventListener('abort', this.onAbort, { once: true });
  }

  /** Count this caller among `w`'s waiters. */
  wait(w: Waiters): void {
    if (this.signal === undefined) return w.addForGood();
    const leave = w.join();
    if (this.signal.aborted) leave(this.signal.reason);
    else this.leaves.push(leave);
  }

  /** The caller has its results: stop listening. */
  done(): void {
    this.signal?.removeEventListener('abort', this.onAbort);
    this.leaves.length = 0;
  }
}

/** A signal that aborts once every one of `signals` has (with the last one's reason). */
export function allAborted(signals: readonly AbortSignal[]): AbortSignal {
  const ctl = new AbortController();
  let left = signals.length;
  const one = (s: AbortSignal): void => {
    if (--left === 0) ctl.abort(s.reason);
  };
  for (const s of signals) {
    if (s.aborted) one(s);
    else s.addEventListener('abort', () => one(s), { once: true });
  }
  return ctl.signal;
}
