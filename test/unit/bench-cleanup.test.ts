import { describe, expect, it } from 'vitest';
import { onCleanup, pendingCleanups, runCleanups } from '../../bench/lib/cleanup.js';
import { gate } from '../helpers/promises.js';

/** Whether `p` is still pending once the event loop has turned (timers and I/O included). */
async function stillPending(p: Promise<unknown>): Promise<boolean> {
  const marker = Symbol('pending');
  const first = await Promise.race([p, new Promise((r) => setImmediate(() => r(marker)))]);
  return first === marker;
}

describe('bench cleanup stack', () => {
  it('undoes newest first, once each, and racing callers wait for the whole pass', async () => {
    const log: string[] = [];
    onCleanup('first', () => {
      log.push('first');
    });
    const slow = gate();
    onCleanup('slow', async () => {
      await slow.wait;
      log.push('slow');
    });
    const runNow = onCleanup('third', () => {
      log.push('third');
    });
    await runNow(); // explicit undo: runs now and leaves the stack
    await runNow(); // ... and never twice
    expect(log).toEqual(['third']);
    // Ctrl-C and the normal exit path both run the stack: neither may return before "first" ran
    const a = runCleanups();
    const b = runCleanups();
    expect(await stillPending(b)).toBe(true);
    slow.open();
    await b;
    expect(log).toEqual(['third', 'slow', 'first']);
    await a;
    expect(pendingCleanups()).toEqual([]);
  });

  it('an exit pass also waits for undos that were started directly and are still running', async () => {
    const log: string[] = [];
    const slow = gate();
    const undo = onCleanup('direct', async () => {
      await slow.wait;
      log.push('direct');
    });
    const direct = undo(); // e.g. a finally block tearing down a network while Ctrl-C arrives
    const pass = runCleanups();
    expect(await stillPending(pass)).toBe(true);
    slow.open();
    await pass;
    expect(log).toEqual(['direct']);
    await direct;
  });

  it('reports a failing undo and carries on with the rest', async () => {
    const log: string[] = [];
    onCleanup('ok', () => {
      log.push('ok');
    });
    onCleanup('boom', () => {
      throw new Error('boom');
    });
    await runCleanups();
    expect(log).toEqual(['ok']);
  });
});
