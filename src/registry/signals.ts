import { StoreError, type ErrorContext } from '../util/errors.js';

/** Reason used when the per-attempt timer fires: the attempt may be retried. */
export class AttemptTimeout extends StoreError {
  constructor(ms: number, context: ErrorContext = {}) {
    super('E_DEADLINE', `request attempt timed out after ${ms} ms`, { ...context, timeoutMs: ms });
    this.name = 'AttemptTimeout';
  }
}
