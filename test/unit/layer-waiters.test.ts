import { describe, expect, it } from 'vitest';
import { allAborted, Waiters } from '../../src/layer/waiters.js';

describe('Waiters (who still waits for a shared fetch)', () => {
  it('is abandoned when the last waiter with a signal gives up, once, and stops listening', () => {
    let calls = 0;
    const w = new Waiters(() => calls++);
    const a = new AbortController();
    const b = new AbortController();
    w.add(a.signal);
    w.add(b.signal);
    a.abort(new Error('a gave up'));
    expect(w.abandoned.aborted).toBe(false);
    b.abort(new Error('b gave up'));
    expect(w.abandoned.aborted).toBe(true);
    expect((w.abandoned.reason as Error).message).toBe('b gave up');
    expect(calls).toBe(1);
    // a late joiner changes nothing
    w.add(new AbortController().signal);
    expect(calls).toBe(1);
  });

  it('a waiter without a signal waits for good; a waiter arriving already aborted counts as gone', () => {
    const forGood = new Waiters();
    const a = new AbortController();
    forGood.add(a.signal);
    forGood.add(undefined);
    a.abort();
    expect(forGood.abandoned.aborted).toBe(false);

    const gone = new Waiters();
    gone.add(AbortSignal.abort());
    expect(gone.abandoned.aborted).toBe(true);
  });

  it('done() removes its listeners: a settled fetch is never abandoned afterwards', () => {
    const w = new Waiters();
    const a = new AbortController();
    w.add(a.signal);
    w.done();
    a.abort();
    expect(w.abandoned.aborted).toBe(false);
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
