/**
 * Who still waits for one piece of shared work (a chunk being fetched). Each waiter comes with
 * the signal that ends its interest (a read's deadline or interrupt, a closed file); a waiter
 * without one waits for good. When the last waiter with a signal gives up and nobody waits for
 * good, `abandoned` aborts: the work's registry request stops (it may be stuck on a hung
 * registry, holding a connection until its timeout), and later callers start afresh instead of
 * joining it.
 */
export class Waiters {
  private readonly ctl = new AbortController();
  private count = 0;
  private forGood = false;
  private readonly cleanups: Array<() => void> = [];

  /** `onAbandoned`: called once, synchronously, when the last waiter gave up. */
  constructor(private readonly onAbandoned?: () => void) {}

  get abandoned(): AbortSignal {
    return this.ctl.signal;
  }

  add(signal: AbortSignal | undefined): void {
    if (this.ctl.signal.aborted) return;
    if (signal === undefined) {
      this.forGood = true;
      return;
    }
    if (signal.aborted) return this.check(signal.reason);
    this.count++;
    const onAbort = (): void => {
      this.count--;
      this.check(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    this.cleanups.push(() => signal.removeEventListener('abort', onAbort));
  }

  /** The work settled: stop listening (long-lived signals must not collect listeners). */
  done(): void {
    for (const c of this.cleanups.splice(0)) c();
  }

  private check(reason: unknown): void {
    if (this.forGood || this.count > 0 || this.ctl.signal.aborted) return;
    this.ctl.abort(reason);
    this.done();
    this.onAbandoned?.();
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
