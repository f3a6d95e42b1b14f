/**
 * A promise rejection nobody handled must not take the mount down. Node's default turns it into an
 * uncaught exception, which exits the process: every container whose lower dir is on the mount
 * then reads ENOTCONN until the store is restarted, for an error that concerned one operation (the
 * operation itself has already answered or timed out through its own deadline). The serving
 * process logs it instead, as the bug it is, and keeps serving. Uncaught exceptions stay fatal:
 * they interrupt code half-way, after which the store's state is unknown.
 */
import type { Logger } from '../util/logger.js';

export interface RejectionSource {
  on(event: 'unhandledRejection', listener: (reason: unknown) => void): unknown;
  off(event: 'unhandledRejection', listener: (reason: unknown) => void): unknown;
}

/** Installs the guard; returns the function that removes it. */
export function guardUnhandledRejections(logger: Logger, source: RejectionSource = process): () => void {
  let seen = 0;
  const onRejection = (reason: unknown): void => {
    seen++;
    logger.error(
      // the original error, stack included: it points at the code that lost the promise
      { err: reason instanceof Error ? reason : new Error(String(reason)), unhandledRejections: seen },
      'unhandled promise rejection (a bug in the store; it keeps serving): please report it with this log line',
    );
  };
  source.on('unhandledRejection', onRejection);
  return () => {
    source.off('unhandledRejection', onRejection);
  };
}
