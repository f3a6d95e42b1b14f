/**
 * releaseBuffer frees a dead Buffer's memory at once, and only a Buffer that is the whole of its
 * ArrayBuffer: never a slice of Node's shared pool or of a larger buffer whose other bytes
 * someone else still reads.
 */
import { describe, expect, it } from 'vitest';
import { gcPacer } from '../../src/util/gc-pacer.js';
import { releaseBuffer, releaseNextTurn } from '../../src/util/release-buffer.js';

describe('releaseBuffer', () => {
  it('detaches a Buffer that owns its whole ArrayBuffer: it reads as empty afterwards', () => {
    const b = Buffer.allocUnsafeSlow(256 * 1024).fill(7);
    const view = b.subarray(10, 20);
    expect(releaseBuffer(b)).toBe(true);
    expect(b.length).toBe(0);
    expect(view.length).toBe(0); // every view reads nothing, never other bytes
    expect(releaseBuffer(b)).toBe(false); // already released
  });

  it("takes what it released off the garbage collection pacer's count", () => {
    gcPacer.note(1 << 20);
    const before = gcPacer.pending;
    expect(releaseBuffer(Buffer.allocUnsafeSlow(300_000))).toBe(true);
    expect(gcPacer.pending).toBe(before - 300_000);
    expect(releaseBuffer(Buffer.alloc(64 * 1024).subarray(1))).toBe(false);
    expect(gcPacer.pending).toBe(before - 300_000); // nothing released, nothing taken off
  });

  it('gives no pacer credit for bytes the pacer never counted (socket reads)', () => {
    gcPacer.note(1 << 20);
    const before = gcPacer.pending;
    const b = Buffer.allocUnsafeSlow(65_536);
    expect(releaseBuffer(b, { counted: false })).toBe(true);
    expect(b.length).toBe(0);
    expect(gcPacer.pending).toBe(before);
  });

  it('releaseNextTurn: usable for the rest of this turn, released at the next', async () => {
    gcPacer.note(1 << 20);
    const before = gcPacer.pending;
    const a = Buffer.allocUnsafeSlow(100_000).fill(1);
    const b = Buffer.allocUnsafeSlow(70_000).fill(2);
    releaseNextTurn(a, { counted: false });
    releaseNextTurn(b);
    await Promise.resolve();
    expect(a[99_999]).toBe(1); // still there within the turn
    await new Promise<void>((r) => setImmediate(r));
    expect(a.length).toBe(0);
    expect(b.length).toBe(0);
    expect(gcPacer.pending).toBe(before - 70_000); // only the counted one is credited
  });

  it('leaves alone views of a larger buffer and slices of the shared allocation pool', () => {
    const big = Buffer.alloc(64 * 1024, 1);
    const part = big.subarray(0, 1024);
    const tail = big.subarray(1024);
    expect(releaseBuffer(part)).toBe(false);
    expect(releaseBuffer(tail)).toBe(false);
    expect(big.length).toBe(64 * 1024);
    expect(big[5]).toBe(1);

    const a = Buffer.from('neighbour one');
    const pooled = Buffer.from('neighbour two');
    expect(a.buffer).toBe(pooled.buffer); // both from Node's pool
    expect(releaseBuffer(pooled)).toBe(false);
    expect(a.toString()).toBe('neighbour one');
    expect(releaseBuffer(Buffer.alloc(0))).toBe(false);
  });
});
