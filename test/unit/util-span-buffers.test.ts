/**
 * Span buffers: taken by a producer for one caller, given back by its last holder; large ones are
 * reused (no fresh mapping per span), small or surplus ones released, and an idle store keeps none.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SpanBuffers } from '../../src/util/span-buffers.js';

const MiB = 1024 * 1024;

afterEach(() => {
  vi.useRealTimers();
});

describe('SpanBuffers', () => {
  it('reuses a large buffer given back whole; a small one is released', () => {
    const pool = new SpanBuffers({ minPooled: 1 * MiB, maxFree: 8 * MiB });
    const a = pool.take(3 * MiB + 5);
    a.fill(1);
    expect(pool.giveBack(a)).toBe(true);
    expect(pool.freeBytes).toBe(4 * MiB);
    const b = pool.take(3 * MiB + 100); // same size class: the same memory again
    expect(b.buffer).toBe(a.buffer);
    expect(b.length).toBe(3 * MiB + 100);
    expect(pool.freeBytes).toBe(0);

    const small = pool.take(1000);
    expect(pool.giveBack(small)).toBe(true);
    expect(small.length).toBe(0); // released: every view reads empty
    expect(pool.freeBytes).toBe(0);
  });

  it('gives back only a buffer it made, as a view of all of it, once', () => {
    const pool = new SpanBuffers({ minPooled: 1 * MiB, maxFree: 8 * MiB });
    const a = pool.take(2 * MiB);
    expect(pool.giveBack(a.subarray(0, MiB))).toBe(false); // a part: other views may be in use
    expect(pool.giveBack(a.subarray(1))).toBe(false);
    expect(pool.giveBack(Buffer.allocUnsafeSlow(2 * MiB))).toBe(false); // not taken here
    expect(pool.giveBack(a)).toBe(true);
    expect(pool.giveBack(a)).toBe(false); // twice is once
    expect(pool.freeBytes).toBe(2 * MiB);
  });

  it('an odd size given back once never keeps the steady sizes out: the oldest free buffers go first', () => {
    const pool = new SpanBuffers({ minPooled: 1 * MiB, maxFree: 10 * MiB });
    const odd = pool.take(9 * MiB);
    pool.giveBack(odd);
    expect(pool.freeBytes).toBe(9 * MiB);
    // the read-ahead's steady spans: two of 5 MiB in flight, given back in turn
    const [s1, s2] = [pool.take(5 * MiB - 7), pool.take(5 * MiB - 9)];
    pool.giveBack(s1); // 14 MiB free: the 9 MiB one goes
    expect(odd.length).toBe(0);
    pool.giveBack(s2);
    expect(pool.freeBytes).toBe(10 * MiB);
    const [t1, t2] = [pool.take(5 * MiB - 1), pool.take(5 * MiB - 2)];
    expect(new Set([t1.buffer, t2.buffer])).toEqual(new Set([s1.buffer, s2.buffer]));
    expect(pool.freeBytes).toBe(0);
    // larger than the whole free room: released at once, nothing else evicted for it
    pool.giveBack(t1);
    const big = pool.take(12 * MiB);
    pool.giveBack(big);
    expect(big.length).toBe(0);
    expect(pool.freeBytes).toBe(5 * MiB);
  });

  it('releases what exceeds maxFree, and every free buffer once none was taken for idleMs', () => {
    vi.useFakeTimers();
    let now = 0;
    const pool = new SpanBuffers({ minPooled: 1 * MiB, maxFree: 4 * MiB, idleMs: 1000, now: () => now });
    const [a, b, c] = [pool.take(2 * MiB), pool.take(2 * MiB), pool.take(2 * MiB)];
    pool.giveBack(a);
    pool.giveBack(b);
    pool.giveBack(c); // over maxFree: the one given back longest ago is released
    expect(pool.freeBytes).toBe(4 * MiB);
    expect(a.length).toBe(0);
    now = 600;
    pool.take(2 * MiB); // used again 600 ms in: the idle clock starts over
    expect(pool.freeBytes).toBe(2 * MiB);
    now = 1000;
    vi.advanceTimersByTime(1000);
    expect(pool.freeBytes).toBe(2 * MiB); // idle 400 ms only
    now = 1600;
    vi.advanceTimersByTime(600);
    expect(pool.freeBytes).toBe(0);
  });

  it('background traffic alone (takes of other sizes, nothing kept) does not keep free buffers resident', () => {
    vi.useFakeTimers();
    let now = 0;
    const pool = new SpanBuffers({ minPooled: 1 * MiB, maxFree: 10 * MiB, idleMs: 1000, now: () => now });
    pool.giveBack(pool.take(5 * MiB)); // a reader's span, kept
    expect(pool.freeBytes).toBe(5 * MiB);
    for (now = 100; now <= 1500; now += 100) {
      // a background unit: another size, released when done
      pool.giveBack(pool.take(8 * MiB), { reuse: false });
      vi.advanceTimersByTime(100);
    }
    expect(pool.freeBytes).toBe(0);
  });
});
