import { say, terminateChildren } from './proc.js';

/**
 * Process-wide undo stack. Everything the harness creates outside its work dir or that outlives it
 * (mounts, namespaces, qdiscs, daemons) registers an undo here, so Ctrl-C and failures still clean up.
 * Undos run last-in first-out; each runs at most once.
 */
type Undo = () => Promise<void> | void;

interface Entry {
  id: number;
  name: string;
  fn: Undo;
}

const stack: Entry[] = [];
/** Undos started directly (not by runCleanups) that have not finished yet. */
const inflight = new Set<Promise<void>>();
let nextId = 1;
let installed = false;
let exiting = false;

/** True once Ctrl-C / SIGTERM started tearing everything down: start nothing new. */
export function aborting(): boolean {
  return exiting;
}

/** Register an undo; returns a function that runs it now (and unregisters it). */
export function onCleanup(name: string, fn: Undo): () => Promise<void> {
  const entry: Entry = { id: nextId++, name, fn };
  stack.push(entry);
  return async () => {
    const i = stack.findIndex((e) => e.id === entry.id);
    if (i < 0) return;
    stack.splice(i, 1);
    // tracked, so an exit in progress waits for this undo too
    const p = Promise.resolve().then(entry.fn);
    inflight.add(p);
    try {
      await p;
    } finally {
      inflight.delete(p);
    }
  };
}

let running: Promise<void> | undefined;

/**
 * Run every pending undo (newest first); errors are reported, never thrown. Single-flight: callers
 * racing here (Ctrl-C and the normal exit path) all wait for the same pass to finish.
 */
export function runCleanups(): Promise<void> {
  running ??= (async () => {
    while (stack.length > 0) {
      const e = stack.pop()!;
      try {
        if (exiting) say(`cleanup: ${e.name}`);
        await e.fn();
      } catch (err) {
        say(`cleanup "${e.name}" failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    while (inflight.size > 0) await Promise.allSettled([...inflight]);
  })().finally(() => {
    running = undefined;
  });
  return running;
}

export function pendingCleanups(): string[] {
  return stack.map((e) => e.name);
}

/** SIGINT/SIGTERM: undo everything, then exit 130/143. */
export function installSignalCleanup(): void {
  if (installed) return;
  installed = true;
  const handler = (sig: NodeJS.Signals) => {
    if (exiting) return;
    exiting = true;
    say(`${sig}: stopping child processes, cleaning up ${stack.length} resource(s)`);
    void terminateChildren()
      .then(() => runCleanups())
      .finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}
