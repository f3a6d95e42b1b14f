import type { ParseTurns } from '../format/toc.js';

/**
 * Orders the store's TOC parses on the one main thread. When a client looks up one layer of an
 * image, the store resolves the image's other layers ahead of it (eager.ts): their TOC fetches
 * overlap the looked-up one's (what matters on a slow link), but their parses shared the main
 * thread with it, so the lookup the client waited on took about as long as all the parses
 * (loopback, same run: per-layer resolution 117/79/57 ms with eager parses competing, 50/17/51
 * with each resolved alone).
 *
 * A resolution a client waits for holds a `demand` from its start to its answer. A parse nobody
 * waits for yet pauses at its next tick (every few dozen entries) while any demand is held (its
 * fetch goes on), and goes on when none is, or at once when it becomes demanded itself (the
 * client asks for that layer: `demand()` wakes it). A demand always ends: its resolution is answered, fails or times
 * out (`[deadlines]`); a resolution held back here that times out is not remembered as failed
 * (resolver.ts), so the client's own lookup of it starts afresh.
 */
export class ParseGate {
  private demands = 0;
  private waiters: Array<() => void> = [];

  /** Demanded resolutions in progress (tests, status). */
  get demanded(): number {
    return this.demands;
  }

  /** Parses waiting for the demands to end (tests). */
  get held(): number {
    return this.waiters.length;
  }

  /** A client waits on a resolution: parses nobody waits for pause until `release()`. */
  demand(): () => void {
    this.demands++;
    // a held parse may be the one now demanded: every held parse looks again
    this.wake();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.demands === 0) this.wake();
    };
  }

  /**
   * The turns of one parse: `isDemanded` says, at any moment, whether someone waits for it (it
   * may change from false to true while the parse runs). `onHeld` learns how long each pause was.
   */
  turns(isDemanded: () => boolean, onHeld?: (ms: number) => void): ParseTurns {
    return {
      pause: () => {
        if (this.demands === 0 || isDemanded()) return undefined;
        return this.hold(isDemanded, onHeld);
      },
    };
  }

  private async hold(isDemanded: () => boolean, onHeld?: (ms: number) => void): Promise<void> {
    const since = performance.now();
    while (this.demands > 0 && !isDemanded()) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    onHeld?.(performance.now() - since);
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const fn of w) fn();
  }
}
