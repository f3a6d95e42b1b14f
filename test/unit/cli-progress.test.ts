/**
 * Progress bars: drawn on a terminal only (the stream's isTTY decides), quiet on pipes and with
 * --json. Streams are fakes that record what would reach the terminal.
 */
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runCheck } from '../../src/cli/check-command.js';
import { waitForPinsWithProgress } from '../../src/cli/pin-command.js';
import { startProgress, wantsProgress, type ProgressStream } from '../../src/cli/progress.js';
import type { PinStatus } from '../../src/store/pins.js';

function fakeStream(isTTY: boolean): ProgressStream & { text: () => string } {
  const chunks: string[] = [];
  return {
    isTTY,
    columns: 160,
    write: ((s: string | Uint8Array, ...rest: unknown[]) => {
      chunks.push(typeof s === 'string' ? s : Buffer.from(s).toString());
      const cb = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
      cb?.();
      return true;
    }) as ProgressStream['write'],
    text: () => chunks.join(''),
  };
}

const pin = (ref: string, state: PinStatus['state'], fetched: number, total: number): PinStatus =>
  ({
    ref,
    state,
    bytesFetched: fetched,
    totalBytes: total,
    percent: (100 * fetched) / total,
    layers: [],
  }) as unknown as PinStatus;

describe('progress bars', () => {
  it('are wanted on a terminal only', () => {
    expect(wantsProgress({ isTTY: true })).toBe(true);
    expect(wantsProgress({ isTTY: false })).toBe(false);
    expect(wantsProgress({})).toBe(false);
  });

  it('write nothing to a stream that is not a terminal', () => {
    const s = fakeStream(false);
    const p = startProgress('x', { stream: s, total: 10, unit: 'count' });
    p.update(5);
    p.stop();
    expect(s.text()).toBe('');
  });

  it('draw done/total on a terminal', () => {
    const s = fakeStream(true);
    const p = startProgress('bench iterations', { stream: s, total: 4, unit: 'count' });
    p.update(1);
    p.stop();
    expect(s.text()).toContain('bench iterations');
    expect(s.text()).toMatch(/\d\/4/);
  });
});

describe('pin add --wait', () => {
  const states = [
    [pin('r/a:1', 'fetching', 1 << 20, 4 << 20), pin('r/b:1', 'pending', 0, 2 << 20)],
    [pin('r/a:1', 'pinned', 4 << 20, 4 << 20), pin('r/b:1', 'fetching', 1 << 20, 2 << 20)],
    [pin('r/a:1', 'pinned', 4 << 20, 4 << 20), pin('r/b:1', 'pinned', 2 << 20, 2 << 20)],
  ];
  const source = (): (() => Promise<PinStatus[]>) => {
    let i = 0;
    return () => Promise.resolve(states[Math.min(i++, states.length - 1)]!);
  };

  it('draws one bar per image on a terminal and returns the final states', async () => {
    const s = fakeStream(true);
    const pins = await waitForPinsWithProgress(source(), ['r/a:1', 'r/b:1'], s, 1);
    expect(pins.map((p) => p.state)).toEqual(['pinned', 'pinned']);
    const out = s.text();
    expect(out).toContain('25%');
    expect(out).toContain('fetching r/a:1');
    expect(out).toContain('pending r/b:1');
    expect(out).toContain('100%');
    expect(out).toContain('pinned r/b:1');
  });

  it('is quiet when stderr is not a terminal', async () => {
    const s = fakeStream(false);
    const pins = await waitForPinsWithProgress(source(), ['r/a:1', 'r/b:1'], s, 1);
    expect(pins.map((p) => p.state)).toEqual(['pinned', 'pinned']);
    expect(s.text()).toBe('');
  });
});

describe('check', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('shows a bar over the chunks on a terminal, nothing with --json', async () => {
    dir = await mkdtemp(join(tmpdir(), 'check-progress-'));
    for (let i = 0; i < 3; i++) {
      const data = Buffer.from(`chunk ${i}`);
      const hex = createHash('sha256').update(data).digest('hex');
      const sub = join(dir, 'cache', 'chunks', 'sha256', hex.slice(0, 2));
      await mkdir(sub, { recursive: true });
      await writeFile(join(sub, hex), data);
    }
    const tty = fakeStream(true);
    const r = await runCheck({ root: dir, progress: tty });
    expect(r.code).toBe(0);
    expect(tty.text()).toContain('check: chunks');
    expect(tty.text()).toMatch(/3\/3/);
    const json = fakeStream(true);
    await runCheck({ root: dir, progress: json, json: true });
    expect(json.text()).toBe('');
  });
});
