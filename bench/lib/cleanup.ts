import { say } from './proc.js';

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
let nextId = 1;
let installed = false;
let exiting = false;

/** Register an undo; returns a function that runs it now (and unregisters it). */
export function onCleanup(name: string, fn: Undo): () => Promise<void> {
  const entry: Entry = { id: nextId++, name, fn };
  stack.push(entry);
  return async () => {
    const i = stack.findIndex((e) => e.id === entry.id);
    if (i < 0) return;
    stack.splice(i, 1);
    await entry.fn();
  };
}

/** Run every pending undo (newest first); errors are reported, never thrown. */
export async function runCleanups(): Promise<void> {
  while (stack.length > 0) {
    const e = stack.pop()!;
    try {
      await e.fn();
    } catch (err) {
      say(`cleanup "${e.name}" failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
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
    say(`${sig}: cleaning up ${stack.length} resource(s)`);
    void runCleanups().finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}
