import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';

/** A pino logger (trace level unless told) whose output is kept in memory, to check what gets logged. */
export function captureLogger(level = 'trace'): { logger: Logger; text(): string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      chunks.push(chunk.toString('utf8'));
      cb();
    },
  });
  const logger = pino({ level }, stream);
  return { logger, text: () => chunks.join('') };
}

/** Everything an error exposes: message, context, cause chain, JSON form. */
export function errorText(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let i = 0; i < 5 && e; i++) {
    if (e instanceof Error) {
      parts.push(e.message, e.stack ?? '');
      const ctx = (e as { context?: unknown }).context;
      if (ctx) parts.push(JSON.stringify(ctx));
      e = (e as { cause?: unknown }).cause;
    } else {
      parts.push(String(e));
      break;
    }
  }
  return parts.join('\n');
}
