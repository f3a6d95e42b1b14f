import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { controlRequest } from '../../src/store/control-socket.js';

/** The real `stargz-store` process, as a node runs it, for tests that need the CLI's own wiring. */

/** node arguments that run the CLI from the TypeScript sources (no dist/ needed). */
export const TS_CLI = [
  '--import',
  fileURLToPath(new URL('../integration/engine-ts-loader.mjs', import.meta.url)),
  fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url)),
];

export interface CliStore {
  child: ChildProcess;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
}

/**
 * Spawn `node <args>` (a serve command) and wait until its control socket `sock` answers (the CLI
 * opens it after mounting). Throws with the process output if it exits first.
 */
export async function startCliStore(args: string[], sock: string): Promise<CliStore> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  for (;;) {
    const up = await controlRequest(sock, { op: 'status' }, { timeoutMs: 2000 }).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (child.exitCode !== null) throw new Error(`store exited: ${out.slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, output: () => out, exited };
}
