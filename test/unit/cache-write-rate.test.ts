import { describe, expect, it } from 'vitest';
import { WriteRate } from '../../src/cache/write-rate.js';

describe('WriteRate', () => {
  it('counts the bytes of the last window only', () => {
    let now = 0;
    const r = new WriteRate(() => now, 1000);
    expect(r.perSecond()).toBe(0);
    r.add(4_000_000);
    now = 500;
    r.add(4_000_000);
    expect(r.perSecond()).toBe(8_000_000);
    now = 1000; // the first mark is a full window old
    expect(r.perSecond()).toBe(4_000_000);
    now = 1499;
    expect(r.perSecond()).toBe(4_000_000);
    now = 1500;
    expect(r.perSecond()).toBe(0);
  });

  it('scales to bytes per second whatever the window', () => {
    let now = 0;
    const r = new WriteRate(() => now, 250);
    r.add(1000);
    now = 100;
    r.add(1000);
    expect(r.perSecond()).toBe(8000);
  });
});
