import { EventEmitter } from 'node:events';
import type { Logger } from './logger.js';

/**
 * Failures of best-effort disk writes (cache files, layer state), reported once per condition.
 * A full or read-only disk makes every write fail; logging each one buried the log (4,738
 * warnings in a minute). The first failure of each condition (ENOSPC, EDQUOT, EROFS, ...) is
 * logged as a warning; the rest are only counted until a write succeeds again, which is logged
 * at info with the number of failures in between. Counters and events are for metrics.
 */

export interface WriteFaultEvent {
  /** errno code of the failure (ENOSPC, EDQUOT, EROFS, ...) or 'unknown'. */
  condition: string;
  /** Failures of this condition since the writes last succeeded (1 for 'fault'). */
  failures: number;
}

export interface WriteFaultStats {
  /** All failed writes since start. */
  failures: number;
  /** Failed writes per condition since start. */
  byCondition: Record<string, number>;
  /** Conditions currently failing (no write has succeeded since they began). */
  failing: string[];
}

export interface WriteFaultMessages {
  /** Warning logged once per condition, e.g. 'cannot write chunk to cache'. */
  failed: string;
  /** Info logged when a write succeeds after failures, e.g. 'cache writes resumed'. */
  resumed: string;
}

/** Emits 'fault' (a condition begins) and 'resumed' (a write succeeded after failures). */
export class WriteFaults extends EventEmitter<{ fault: [WriteFaultEvent]; resumed: [WriteFaultEvent[]] }> {
  private total = 0;
  private readonly byCondition = new Map<string, number>();
  /** Condition -> failures since it began. */
  private readonly active = new Map<string, number>();

  constructor(private readonly messages: WriteFaultMessages) {
    super();
  }

  /** Record a failed write; logs only the first failure of a condition. */
  failed(err: unknown, logger: Logger, context: Record<string, unknown> = {}): void {
    const condition = conditionOf(err);
    this.total++;
    this.byCondition.set(condition, (this.byCondition.get(condition) ?? 0) + 1);
    const n = (this.active.get(condition) ?? 0) + 1;
    this.active.set(condition, n);
    if (n > 1) return;
    safeLog(() =>
      logger.warn(
        { err, condition, ...context },
        `${this.messages.failed} (${condition}); further ${condition} failures are counted, not logged, until a write succeeds`,
      ),
    );
    this.emit('fault', { condition, failures: 1 });
  }

  /** Record a successful write; logs recovery once if writes were failing. */
  succeeded(logger: Logger): void {
    if (this.active.size === 0) return;
    const ended = [...this.active].map(([condition, failures]) => ({ condition, failures }));
    this.active.clear();
    safeLog(() => logger.info({ conditions: ended }, this.messages.resumed));
    this.emit('resumed', ended);
  }

  stats(): WriteFaultStats {
    return {
      failures: this.total,
      byCondition: Object.fromEntries(this.byCondition),
      failing: [...this.active.keys()],
    };
  }
}

function conditionOf(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === 'string' && code !== '' ? code : 'unknown';
}

function safeLog(fn: () => void): void {
  try {
    fn();
  } catch {
    // a failing logger must not turn a best-effort write into an error
  }
}

/** Writes of per-layer state files (one store-wide reporter: every layer shares the disk). */
export const layerStateWriteFaults = new WriteFaults({
  failed: 'cannot persist layer state',
  resumed: 'layer state writes resumed',
});
