import { pino, type Logger } from 'pino';

export type { Logger };

/** Structured JSON logs on stderr (stdout is reserved for command output). */
export function createLogger(level = 'info'): Logger {
  return pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: ['password', '*.password', 'token', '*.token', 'authorization', '*.authorization'] },
    },
    pino.destination({ fd: 2, sync: false }),
  );
}

/** A logger that drops everything (library code defaults to it). */
export const silentLogger: Logger = pino({ level: 'silent' });
