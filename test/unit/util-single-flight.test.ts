import { describe, expect, it } from 'vitest';
import { SingleFlight } from '../../src/util/single-flight.js';

describe('SingleFlight', () => {
  it('shares one running call between concurrent callers of a key', async () => {
    const sf = new SingleFlight<string, number>();
    let calls = 0;
    let release!: (v: number) => void;
    const gate = new Promise<number>((r) => (release = r));
    const a = sf.run('k', () => {
      calls++;
      return gate;
    });
    const b = sf.run('k', () => {
      calls++;
      return Promise.resolve(-1);
    });
    expect(sf.has('k')).toBe(true);
    release(7);
    expect(await a).toBe(7);
    expect(await b).toBe(7);
    expect(calls).toBe(1);
    expect(sf.size).toBe(0);
  });

  it('does not keep a failure: the next caller starts afresh', async () => {
    const sf = new SingleFlight<string, number>();
    await expect(sf.run('k', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(sf.has('k')).toBe(false);
    expect(await sf.run('k', () => Promise.resolve(3))).toBe(3);
  });

  it('keeps keys apart', async () => {
    const sf = new SingleFlight<string, string>();
    const [x, y] = await Promise.all([sf.run('a', async () => 'A'), sf.run('b', async () => 'B')]);
    expect([x, y]).toEqual(['A', 'B']);
  });

  it('lists the running calls (close waits for them)', async () => {
    const sf = new SingleFlight<string, number>();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    void sf.run('a', async () => {
      await gate;
      return 1;
    });
    expect([...sf.values()]).toHaveLength(1);
    release();
    await Promise.all([...sf.values()]);
    expect([...sf.values()]).toHaveLength(0);
  });
});

describe('SingleFlight edge cases', () => {
  it('a call that throws synchronously is not kept', async () => {
    const sf = new SingleFlight<string, number>();
    await expect(
      sf.run('k', () => {
        throw new Error('sync');
      }),
    ).rejects.toThrow('sync');
    expect(sf.has('k')).toBe(false);
  });

  it('forget drops a call its callers gave up on; the next caller starts afresh', async () => {
    const sf = new SingleFlight<string, number>();
    let release!: (v: number) => void;
    const stuck = sf.run('k', () => new Promise<number>((r) => (release = r)));
    sf.forget('k', stuck);
    expect(sf.has('k')).toBe(false);
    const fresh = sf.run('k', () => Promise.resolve(2));
    release(1);
    expect(await stuck).toBe(1);
    expect(await fresh).toBe(2);
    // the stuck call settling later does not remove the fresh one's entry
    const again = sf.run('k', () => new Promise<number>(() => undefined));
    sf.forget('k', stuck);
    expect(sf.get('k')).toBe(again);
  });

  it('share: one caller giving up does not fail the others; the shared call has its own signal', async () => {
    const sf = new SingleFlight<string, number>();
    let release!: (v: number) => void;
    let own: AbortSignal | undefined;
    const first = new AbortController();
    const fn = (signal: AbortSignal): Promise<number> => {
      own = signal;
      return new Promise<number>((r) => (release = r));
    };
    const a = sf.share('k', first.signal, 60_000, () => new Error('late'), fn);
    const b = sf.share('k', new AbortController().signal, 60_000, () => new Error('late'), fn);
    first.abort(new Error('caller gave up'));
    await expect(a).rejects.toMatchObject({ code: 'E_ABORTED' });
    expect(own?.aborted).toBe(false);
    release(5);
    expect(await b).toBe(5);
  });

  it('share: the shared call is aborted by its own deadline with the given error', async () => {
    const sf = new SingleFlight<string, number>();
    const seen = sf.share(
      'k',
      undefined,
      1,
      () => new Error('took too long'),
      (signal) => {
        return new Promise<number>((_, reject) => {
          signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
        });
      },
    );
    await expect(seen).rejects.toThrow('took too long');
    expect(sf.has('k')).toBe(false);
  });
});
