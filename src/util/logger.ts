import { createRequire } from 'node:module';
import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/** `json`: one JSON object per line (services, journald); `text`: readable, coloured lines. */
export type LogFormat = 'json' | 'text';
export const LOG_FORMATS: readonly LogFormat[] = ['json', 'text'];

/** `auto` (or nothing): text on a terminal, JSON otherwise (systemd, pipes, files). */
export function resolveLogFormat(
  format: LogFormat | 'auto' | undefined,
  isTty = process.stderr.isTTY === true,
): LogFormat {
  return format === undefined || format === 'auto' ? (isTty ? 'text' : 'json') : format;
}

/**
 * Logs on stderr (stdout is reserved for command output), level names rather than numbers.
 * JSON by default; `text` goes through pino-pretty, loaded only then (it is not needed by services).
 */
export function createLogger(level = 'info', format: LogFormat | 'auto' = 'json'): Logger {
  const opts: LoggerOptions = {
    level,
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: ['password', '*.password', 'token', '*.token', 'authorization', '*.authorization'] },
  };
  if (resolveLogFormat(format) === 'text') return pino(opts, prettyStream());
  // "level":"info" rather than 30: readable in journalctl and jq without a lookup table.
  return pino(
    { ...opts, formatters: { level: (label) => ({ level: label }) } },
    pino.destination({ fd: 2, sync: false }),
  );
}

function prettyStream(): DestinationStream {
  // pino-pretty is CommonJS; a synchronous require keeps createLogger synchronous.
  const pretty = createRequire(import.meta.url)('pino-pretty') as (
    o: Record<string, unknown>,
  ) => DestinationStream;
  return pretty({
    destination: 2,
    sync: true,
    colorize: process.stderr.isTTY === true && process.env.NO_COLOR === undefined,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
  });
}

/** A logger that drops everything (library code defaults to it). */
export const silentLogger: Logger = pino({ level: 'silent' });
