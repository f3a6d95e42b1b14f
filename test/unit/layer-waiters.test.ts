import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { allAborted, Interest, Waiters } from '../../src/layer/waiters.js';

describe('Waiters / Interest (who still waits for a shared fetch)', () => {
  it('is abandoned when the last waiter gives up, once', () => {
    let calls = 0;
    const w = new Waiters(() => calls++);
    const a = new AbortController();
    const b = new AbortController();
    new Interest(a.signal).wait(w);
    new Interest(b.signal).wait(w);
    a.abort(new Error('a gave up'));
    expect(w.abandoned.aborted).toBe(false);
    b.abort(new Error('b gave up'));
    expect(w.abandoned.aborted).toBe(true);
    expect((w.abandoned.reason as Error).message).toBe('b gave up');
    expect(calls).toBe(1);
    // a late joiner changes nothing
    new Interest(new AbortController().signal).wait(w);
    const leave = w.join();
    leave();
    expect(calls).toBe(1);
  });

  it('a caller without a signal waits for good; one arriving already aborted counts as gone', () => {
    const forGood = new Waiters();
    const a = new AbortController();
    new Interest(a.signal).wait(forGood);
    new Interest(undefined).wait(forGood);
    a.abort();
    expect(forGood.abandoned.aborted).toBe(false);

    const gone = new Waiters();
    new Interest(AbortSignal.abort()).wait(gone);
    expect(gone.abandoned.aborted).toBe(true);
  });

  it('one listener per caller however many chunks it waits for; done() removes it', () => {
    const a = new AbortController();
    const interest = new Interest(a.signal);
    const all = Array.from({ length: 1000 }, () => new Waiters());
    for (const w of all) interest.wait(w);
    expect(getEventListeners(a.signal, 'abort')).toHaveLength(1);
    interest.done();
    expect(getEventListeners(a.signal, 'abort')).toHaveLength(0);
    // settled work is never abandoned afterwards
    a.abort();
    expect(all.some((w) => w.abandoned.aborted)).toBe(false);
  });

  it('allAborted fires only once every signal has', () => {
    const a = new AbortController();
    const b = new AbortController();
    const all = allAborted([a.signal, b.signal, AbortSignal.abort()]);
    a.abort();
    expect(all.aborted).toBe(false);
    b.abort('last');
    expect(all.aborted).toBe(true);
    expect(all.reason).toBe('last');
  });
});
