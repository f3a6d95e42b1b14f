import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { guardUnhandledRejections } from '../../src/cli/rejection-guard.js';
import { captureLogger } from '../helpers/registry-log-capture.js';

function logged(text: string): Array<Record<string, unknown>> {
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('unhandled rejection guard', () => {
  it('logs each unhandled rejection as an error with its stack, and is removable', () => {
    const source = new EventEmitter();
    const { logger, text } = captureLogger();
    const remove = guardUnhandledRejections(logger, source);
    const bug = new Error('lost promise');
    source.emit('unhandledRejection', bug);
    source.emit('unhandledRejection', 'a string reason');
    expect(logged(text())).toEqual([
      expect.objectContaining({
        level: 50,
        unhandledRejections: 1,
        err: expect.objectContaining({
          message: 'lost promise',
          stack: expect.stringContaining('lost promise'),
        }),
      }),
      expect.objectContaining({
        level: 50,
        unhandledRejections: 2,
        err: expect.objectContaining({ message: 'a string reason' }),
      }),
    ]);
    remove();
    expect(source.listenerCount('unhandledRejection')).toBe(0);
  });

  it('logs a real unhandled rejection of this process', async () => {
    const { logger, text } = captureLogger();
    // vitest installs its own listener (it reports such rejections as errors); take it off for this one
    const others = process.listeners('unhandledRejection');
    for (const l of others) process.off('unhandledRejection', l);
    const remove = guardUnhandledRejections(logger);
    try {
      const emitted = new Promise<void>((resolve) => process.once('unhandledRejection', () => resolve()));
      void Promise.reject(new Error('nobody awaits this'));
      await emitted;
    } finally {
      remove();
      for (const l of others) process.on('unhandledRejection', l);
    }
    expect(logged(text()).map((l) => (l.err as { message?: string } | undefined)?.message)).toEqual([
      'nobody awaits this',
    ]);
  });
});
