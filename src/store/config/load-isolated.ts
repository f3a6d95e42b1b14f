import { fork } from 'node:child_process';
import { StoreError, type ErrorCode, type ErrorContext } from '../../util/errors.js';
import type { ConfigFlags, LoadedConfig } from './load.js';

/**
 * The serving process's loadConfig: the same reading and validation (load.ts), run in a short-lived
 * child process, so the schema library never enters the daemon's memory. Modules stay loaded for
 * good once imported, and a store reads its config only at start-up. Measured on an idle store
 * 15 s after start (Node 24, zod 4): V8 heap used 20.6 -> 16.1 MB, RSS 105-106 -> 102-103 MB.
 * Not a worker thread: a worker's exit left its malloc arena resident (idle RSS no lower, and 10
 * large layers mounted peaked as high). The child costs ~0.1 s of start-up, before the mount
 * exists. The result is plain data, sent with the structured clone ('advanced' serialization).
 */
export function loadConfigIsolated(flags: ConfigFlags): Promise<LoadedConfig> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const fail = (message: string): void => {
      if (settled) return;
      settled = true;
      reject(new StoreError('E_CONFIG', `reading the config: ${message}`));
    };
    // execArgv is inherited: run from the TypeScript sources, the child needs the same hooks
    const child = fork(CHILD_URL, [], {
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child.once('message', (reply: IsolatedReply) => {
      child.disconnect();
      if (settled) return;
      settled = true;
      if (reply.ok) resolve(reply.loaded);
      else reject(new StoreError(reply.code, reply.message, reply.context));
    });
    child.once('error', (err) => fail(err.message));
    // 'close', not 'exit': it comes after the IPC channel has delivered every message
    child.once('close', (code, signal) =>
      fail(`the config reader exited (${signal ?? `code ${code}`}) without an answer`),
    );
    child.send(flags);
  });
}

/**
 * The compiled child next to this module; run from the TypeScript sources (the tests' TS_CLI), the
 * .ts one, which the same module hooks load.
 */
const CHILD_URL = new URL(
  import.meta.url.endsWith('.ts') ? './load-child.ts' : './load-child.js',
  import.meta.url,
);

/** What the child sends back. */
export type IsolatedReply =
  { ok: true; loaded: LoadedConfig } | { ok: false; code: ErrorCode; message: string; context: ErrorContext };
