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

  it('releases what exceeds maxFree, and every free buffer once none was taken for idleMs', () => {
    vi.useFakeTimers();
    let now = 0;
    const pool = new SpanBuffers({ minPooled: 1 * MiB, maxFree: 4 * MiB, idleMs: 1000, now: () => now });
    const [a, b, c] = [pool.take(2 * MiB), pool.take(2 * MiB), pool.take(2 * MiB)];
    pool.giveBack(a);
    pool.giveBack(b);
    pool.giveBack(c); // over maxFree: released
    expect(pool.freeBytes).toBe(4 * MiB);
    expect(c.length).toBe(0);
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
});
