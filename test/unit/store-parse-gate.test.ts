/**
 * The parse gate (store/parse-gate.ts) and its hook in the TOC pipeline (format/toc.ts Slicer):
 * parses nobody waits for pause at slice boundaries while a client waits on another resolution.
 * Driven by promises and event-loop turns only.
 */
import { describe, expect, it } from 'vitest';
import { Slicer } from '../../src/format/toc.js';
import { ParseGate } from '../../src/store/parse-gate.js';
import { gate, turns, watch } from '../helpers/promises.js';

describe('ParseGate', () => {
  it('holds a parse nobody waits for while a demand is held, and lets it go when the last one ends', async () => {
    const gate = new ParseGate();
    const ahead = gate.turns(() => false);
    expect(ahead.pause()).toBeUndefined();
    const a = gate.demand();
    const b = gate.demand();
    let resumed = false;
    const held = ahead.pause()!.then(() => void (resumed = true));
    await turns();
    expect(gate.held).toBe(1);
    a();
    a(); // releasing twice counts once
    await turns();
    expect(resumed).toBe(false);
    b();
    await held;
    expect(gate.demanded).toBe(0);
  });

  it('never holds a demanded parse, and frees a held one once it becomes demanded', async () => {
    const gate = new ParseGate();
    let asked = false;
    const held: number[] = [];
    const t = gate.turns(
      () => asked,
      (ms) => held.push(ms),
    );
    const release = gate.demand();
    expect(gate.turns(() => true).pause()).toBeUndefined();
    let resumed = false;
    const p = t.pause()!.then(() => void (resumed = true));
    await turns();
    expect(resumed).toBe(false);
    // the client asks for this layer: its resolution takes a demand of its own, which wakes it
    asked = true;
    const mine = gate.demand();
    await p;
    expect(held).toHaveLength(1);
    expect(t.pause()).toBeUndefined();
    release();
    mine();
  });
});

describe('Slicer', () => {
  it('holds at any tick the hook says so, without waiting for the slice to end', async () => {
    const hold = gate();
    let calls = 0;
    // a slice that never ends by itself: only the hook can stop it
    const slicer = new Slicer(Number.POSITIVE_INFINITY, () => (++calls === 1 ? hold.wait : undefined));
    const tick = watch(slicer.tick());
    await turns();
    expect(calls).toBe(1);
    expect(tick.settled).toBe(false);
    hold.open();
    await tick.done;
    // the hook lets it go on and the slice is not over: the next tick returns without a pause
    await slicer.tick();
    expect(calls).toBe(2);
  });

  it('asks the hook again after the turn it gives the event loop at the end of a slice', async () => {
    const hold = gate();
    const answers = [undefined, hold.wait];
    let calls = 0;
    const slicer = new Slicer(0, () => answers[calls++]);
    const tick = watch(slicer.tick());
    await turns();
    // asked before the slice ended (go on) and after the event loop's turn (hold)
    expect(calls).toBe(2);
    expect(tick.settled).toBe(false);
    hold.open();
    await tick.done;
  });
});
