import { describe, expect, it } from 'vitest';
import { FetchScheduler, Preempted } from '../../src/layer/index.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('FetchScheduler', () => {
  it('runs background work only when no on-demand work is in flight and after the quiet period', async () => {
    const s = new FetchScheduler({ quietMs: 80 });
    const events: string[] = [];
    let releaseFg!: () => void;
    const fg = s.foreground(async () => {
      events.push('fg-start');
      await new Promise<void>((r) => (releaseFg = r));
      events.push('fg-end');
    });
    let bgStartedAt = 0;
    const bg = s.background(async () => {
      bgStartedAt = performance.now();
      events.push('bg');
    });
    await sleep(50);
    expect(events).toEqual(['fg-start']);
    const fgEnd = performance.now();
    releaseFg();
    await fg;
    await bg;
    expect(events).toEqual(['fg-start', 'fg-end', 'bg']);
    expect(bgStartedAt - fgEnd).toBeGreaterThanOrEqual(75);
  });

  it('bounds background concurrency', async () => {
    const s = new FetchScheduler({ quietMs: 0, backgroundConcurrency: 2 });
    let running = 0;
    let peak = 0;
    await Promise.all(
      Array.from({ length: 8 }, () =>
        s.background(async () => {
          running++;
          peak = Math.max(peak, running);
          await sleep(10);
          running--;
        }),
      ),
    );
    expect(peak).toBe(2);
  });

  it('an on-demand fetch preempts running background work, which is re-run later', async () => {
    const s = new FetchScheduler({ quietMs: 10 });
    let attempts = 0;
    let sawPreempt = false;
    const bg = s.background(async (signal) => {
      attempts++;
      if (attempts === 1) {
        await new Promise<void>((_, reject) => {
          signal.addEventListener('abort', () => {
            sawPreempt = signal.reason instanceof Preempted;
            reject(signal.reason as Error);
          });
        });
      }
      return 'done';
    });
    await sleep(20);
    expect(attempts).toBe(1);
    await s.foreground(async () => {
      await sleep(5);
    });
    expect(await bg).toBe('done');
    expect(sawPreempt).toBe(true);
    expect(attempts).toBe(2);
    expect(s.stats().preemptions).toBe(1);
  });

  it('a cancelled background task rejects, waiting or running', async () => {
    const s = new FetchScheduler({ quietMs: 0 });
    const ac = new AbortController();
    let release!: () => void;
    const fg = s.foreground(() => new Promise<void>((r) => (release = r)));
    const waiting = s.background(async () => 'never', ac.signal);
    ac.abort(new Error('closed'));
    await expect(waiting).rejects.toThrow('closed');
    release();
    await fg;
    const ac2 = new AbortController();
    const running = s.background(
      (signal) =>
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error))),
      ac2.signal,
    );
    await sleep(5);
    ac2.abort(new Error('closed too'));
    await expect(running).rejects.toThrow('closed too');
    expect(s.stats()).toMatchObject({ backgroundRunning: 0, foregroundInFlight: 0 });
  });

  it('background CPU steps run one at a time and wait for on-demand work', async () => {
    const s = new FetchScheduler({ quietMs: 0 });
    let running = 0;
    let peak = 0;
    const step = () =>
      s.backgroundCpu(async () => {
        running++;
        peak = Math.max(peak, running);
        await sleep(5);
        running--;
      });
    await Promise.all([step(), step(), step()]);
    expect(peak).toBe(1);
    let release!: () => void;
    const fg = s.foreground(() => new Promise<void>((r) => (release = r)));
    let ran = false;
    const blocked = s.backgroundCpu(async () => {
      ran = true;
    });
    await sleep(30);
    expect(ran).toBe(false);
    release();
    await fg;
    await blocked;
    expect(ran).toBe(true);
  });
});
