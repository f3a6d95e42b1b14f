import { describe, expect, it } from 'vitest';
import { FetchScheduler, Preempted } from '../../src/layer/index.js';
import { ManualClock } from '../../src/util/clock.js';
import { gate } from '../helpers/promises.js';

/** Let every pending promise job and immediate run (event-driven, no duration involved). */
async function settle(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((r) => setImmediate(r));
}

/**
 * Submits one task per gate through `submit`; each holds until its gate opens. `running()` and
 * `peak()` count the tasks inside at once; gates open one by one, settling before each.
 */
function gatedTasks(
  count: number,
  submit: (fn: () => Promise<void>) => Promise<void>,
): { running: () => number; peak: () => number; openEach: (check?: () => void) => Promise<void> } {
  let running = 0;
  let peak = 0;
  const gates = Array.from({ length: count }, () => gate());
  const tasks = gates.map((g) =>
    submit(async () => {
      running++;
      peak = Math.max(peak, running);
      await g.wait;
      running--;
    }),
  );
  return {
    running: () => running,
    peak: () => peak,
    openEach: async (check) => {
      for (const g of gates) {
        await settle();
        check?.();
        g.open();
      }
      await Promise.all(tasks);
    },
  };
}

describe('FetchScheduler', () => {
  it('runs background work only when no on-demand work is in flight and after the quiet period', async () => {
    const clock = new ManualClock();
    const s = new FetchScheduler({ quietMs: 80, clock });
    const events: string[] = [];
    const fgGate = gate();
    const fg = s.foreground(async () => {
      events.push('fg-start');
      await fgGate.wait;
      events.push('fg-end');
    });
    const bg = s.background(async () => {
      events.push(`bg@${clock.now()}`);
    });
    await settle();
    expect(events).toEqual(['fg-start']);
    clock.advance(1000); // time passing while on-demand work runs does not count as quiet
    fgGate.open();
    await fg;
    await settle();
    expect(events).toEqual(['fg-start', 'fg-end']);
    clock.advance(79);
    await settle();
    expect(events).toEqual(['fg-start', 'fg-end']);
    clock.advance(1);
    await bg;
    expect(events).toEqual(['fg-start', 'fg-end', 'bg@1080']);
  });

  it('bounds background concurrency', async () => {
    const s = new FetchScheduler({ quietMs: 0, backgroundConcurrency: 2 });
    const t = gatedTasks(8, (fn) => s.background(fn));
    await t.openEach(() => expect(t.running()).toBeLessThanOrEqual(2));
    expect(t.peak()).toBe(2);
  });

  it('an on-demand fetch preempts running background work, which is re-run later', async () => {
    const clock = new ManualClock();
    const s = new FetchScheduler({ quietMs: 10, clock });
    let attempts = 0;
    let sawPreempt = false;
    const started = gate();
    const bg = s.background(async (signal) => {
      attempts++;
      if (attempts === 1) {
        // registered before anyone can preempt: the abort cannot be missed
        const aborted = new Promise<void>((_, reject) => {
          signal.addEventListener('abort', () => {
            sawPreempt = signal.reason instanceof Preempted;
            reject(signal.reason as Error);
          });
        });
        started.open();
        await aborted;
      }
      return 'done';
    });
    await started.wait;
    expect(attempts).toBe(1);
    await s.foreground(async () => undefined);
    // the re-run waits for the quiet period after the on-demand fetch
    await settle();
    expect(attempts).toBe(1);
    clock.advance(10);
    expect(await bg).toBe('done');
    expect(sawPreempt).toBe(true);
    expect(attempts).toBe(2);
    expect(s.stats().preemptions).toBe(1);
  });

  it('on-demand work that needs no network preempts nothing, yet holds background CPU steps back', async () => {
    const s = new FetchScheduler({ quietMs: 0 });
    const started = gate();
    const bgGate = gate();
    let aborted = false;
    const bg = s.background(async (signal) => {
      signal.addEventListener('abort', () => (aborted = true));
      started.open();
      await bgGate.wait;
      return 'kept';
    });
    await started.wait;
    const fgGate = gate();
    const fg = s.foreground(() => fgGate.wait, false);
    let cpuRan = false;
    const cpu = s.backgroundCpu(async () => {
      cpuRan = true;
    });
    await settle();
    expect(aborted).toBe(false);
    expect(cpuRan).toBe(false);
    fgGate.open();
    await fg;
    await cpu;
    expect(cpuRan).toBe(true);
    bgGate.open();
    expect(await bg).toBe('kept');
    expect(s.stats().preemptions).toBe(0);
  });

  it('a cancelled background task rejects, waiting or running', async () => {
    const s = new FetchScheduler({ quietMs: 0 });
    const ac = new AbortController();
    const fgGate = gate();
    const fg = s.foreground(() => fgGate.wait);
    const waiting = s.background(async () => 'never', ac.signal);
    ac.abort(new Error('closed'));
    await expect(waiting).rejects.toThrow('closed');
    fgGate.open();
    await fg;
    const ac2 = new AbortController();
    const started = gate();
    const running = s.background((signal) => {
      const p = new Promise((_, reject) =>
        signal.addEventListener('abort', () => reject(signal.reason as Error)),
      );
      started.open();
      return p;
    }, ac2.signal);
    await started.wait;
    ac2.abort(new Error('closed too'));
    await expect(running).rejects.toThrow('closed too');
    expect(s.stats()).toMatchObject({ backgroundRunning: 0, foregroundInFlight: 0 });
  });

  it('background CPU steps run one at a time and wait for on-demand work', async () => {
    const s = new FetchScheduler({ quietMs: 0 });
    const t = gatedTasks(3, (fn) => s.backgroundCpu(fn));
    await t.openEach();
    expect(t.peak()).toBe(1);
    const fgGate = gate();
    const fg = s.foreground(() => fgGate.wait);
    let ran = false;
    const blocked = s.backgroundCpu(async () => {
      ran = true;
    });
    await settle();
    expect(ran).toBe(false);
    fgGate.open();
    await fg;
    await blocked;
    expect(ran).toBe(true);
  });

  it('prefetch runs at once, holds background back, and waits for on-demand fetches', async () => {
    const s = new FetchScheduler({ quietMs: 0 });
    const events: string[] = [];
    const fgGate = gate();
    const fg = s.foreground(async () => {
      events.push('fg');
      await fgGate.wait;
    });
    const pf = s.prefetch(async () => {
      events.push('prefetch');
    });
    await settle();
    expect(events).toEqual(['fg']);
    fgGate.open();
    await Promise.all([fg, pf]);
    expect(events).toEqual(['fg', 'prefetch']);
    const pfGate = gate();
    const pf2 = s.prefetch(() => pfGate.wait);
    let bgRan = false;
    const bg = s.background(async () => {
      bgRan = true;
    });
    await settle();
    expect(bgRan).toBe(false);
    pfGate.open();
    await Promise.all([pf2, bg]);
    expect(bgRan).toBe(true);
  });

  it('read-ahead preempts background but does not hold prefetch back; a reader waiting does', async () => {
    const s = new FetchScheduler({ quietMs: 0 });
    const events: string[] = [];
    // background running: read-ahead takes the network back from it
    const bgGate = gate();
    let bgSignal: AbortSignal | undefined;
    let bgRuns = 0;
    const bg = s.background(async (signal) => {
      bgRuns++;
      bgSignal = signal;
      if (bgRuns === 1)
        await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
      await bgGate.wait;
    });
    await settle();
    const raGate = gate();
    const ra = s.readAhead(async () => {
      events.push('read-ahead');
      await raGate.wait;
    });
    await settle();
    expect(bgSignal?.reason).toBeInstanceOf(Preempted);
    // prefetch starts while the read-ahead step is in flight
    const pf = s.prefetch(async () => {
      events.push('prefetch');
    });
    await pf;
    expect(events).toEqual(['read-ahead', 'prefetch']);
    // a reader waiting (here on the read-ahead step) holds the next prefetch back
    const reader = s.onDemand(() => ra);
    const pf2 = s.prefetch(async () => {
      events.push('prefetch 2');
    });
    await settle();
    expect(events).toEqual(['read-ahead', 'prefetch']);
    raGate.open();
    await Promise.all([reader, pf2]);
    expect(events).toEqual(['read-ahead', 'prefetch', 'prefetch 2']);
    bgGate.open();
    await bg;
    expect(bgRuns).toBe(2); // preempted once, then re-run
  });

  it('background bandwidth is paced on the injected clock', async () => {
    const clock = new ManualClock();
    const s = new FetchScheduler({ quietMs: 0, clock, bandwidthBytesPerSec: 1000 });
    const done: number[] = [];
    const takes = [500, 500, 1000].map((n, i) => s.takeBandwidth(n).then(() => done.push(i)));
    await settle();
    expect(done).toEqual([0]); // the first bytes go at once
    clock.advance(499);
    await settle();
    expect(done).toEqual([0]);
    clock.advance(1);
    await settle();
    expect(done).toEqual([0, 1]);
    clock.advance(499);
    await settle();
    expect(done).toEqual([0, 1]);
    clock.advance(1);
    await Promise.all(takes);
    expect(done).toEqual([0, 1, 2]);
    // 2000 bytes in 1000 ms: the third take's 1000 bytes start at t=1000 (1000 bytes/s)
    expect(clock.now()).toBe(1000);
  });

  it('a layer waits for its quiet period after its last read', async () => {
    const clock = new ManualClock();
    const s = new FetchScheduler({ quietMs: 2000, clock });
    let last: number | undefined;
    await s.layerQuiet(() => last); // never read: no wait
    last = 0;
    let passed = false;
    const q = s.layerQuiet(() => last).then(() => (passed = true));
    clock.advance(1500);
    last = 1500; // another read: the quiet period starts again
    clock.advance(1000);
    await settle();
    expect(passed).toBe(false);
    clock.advance(1000);
    await q;
    expect(passed).toBe(true);
  });
});
