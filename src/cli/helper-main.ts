import { controlRequest, DEFAULT_CONTROL_SOCKET, parseCredentialMap } from '../store/control-socket.js';
import { isStoreError } from '../util/errors.js';
import { versionLine } from './version.js';

/**
 * stargz-store-helper [socket]
 *
 * containers/image's `additional-layer-store-auth-helper`: c/image runs it (no arguments) before a pull
 * with `{"<ref>":{"username","password","identityToken"}}` on stdin and waits for it, so it must be fast
 * and must never hang. It validates the payload and hands it to the running store over the control
 * socket. Exit 0 on success, 1 with a one-line reason on stderr otherwise. Secrets are never printed.
 */
const MAX_STDIN = 1024 * 1024;
const TIMEOUT_MS = 10_000;

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of process.stdin) {
    const b = chunk as Buffer;
    size += b.length;
    if (size > MAX_STDIN) throw new Error(`stdin larger than ${MAX_STDIN} bytes`);
    chunks.push(b);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function main(argv: string[]): Promise<number> {
  const arg = argv[0];
  if (arg === '-V' || arg === '--version') {
    process.stdout.write(`${versionLine().replace(/^stargz-store /, 'stargz-store-helper ')}\n`);
    return 0;
  }
  if (arg === '-h' || arg === '--help') {
    process.stdout.write(
      `usage: stargz-store-helper [socket]\n` +
        `Reads {"<ref>":{"username","password","identityToken"}} on stdin and passes it to the running\n` +
        `stargz-store over its control socket (default ${DEFAULT_CONTROL_SOCKET}).\n`,
    );
    return 0;
  }
  if (argv.length > 1) throw new Error('expected at most one argument: the store socket path');
  const socket = arg ?? DEFAULT_CONTROL_SOCKET;

  const text = await readStdin();
  let payload: unknown;
  try {
    payload = JSON.parse(text);
  } catch {
    throw new Error('stdin is not valid JSON (expected {"<ref>":{"username":...,"password":...}})');
  }
  const data = parseCredentialMap(payload);
  await controlRequest(socket, { op: 'addCredentials', data }, { timeoutMs: TIMEOUT_MS });
  return 0;
}

// Never let a stuck stdin or socket block the caller's pull forever.
const guard = setTimeout(() => {
  process.stderr.write(`stargz-store-helper: timed out after ${TIMEOUT_MS} ms\n`);
  process.exit(1);
}, TIMEOUT_MS + 2000);
guard.unref();

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  const msg = isStoreError(err)
    ? `${err.code}: ${err.message}`
    : err instanceof Error
      ? err.message
      : String(err);
  process.stderr.write(`stargz-store-helper: ${msg}\n`);
  process.exitCode = 1;
}
