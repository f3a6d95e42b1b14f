/**
 * Promise tools for tests that wait on events, never on time: a promise the test settles itself,
 * a promise whose state can be looked at without waiting, and a few event-loop turns.
 */

/** A promise the test settles itself. */
export function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

/** A promise with its state visible (tests look without waiting); `undefined` is settled. */
export function watch(p: Promise<void> | undefined): { settled: boolean; done: Promise<void> } {
  const w = { settled: p === undefined, done: Promise.resolve() };
  if (p !== undefined) w.done = p.then(() => void (w.settled = true));
  return w;
}

/** Let pending promise jobs and immediates run for `n` event-loop turns (no duration involved). */
export async function turns(n = 5): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
}
