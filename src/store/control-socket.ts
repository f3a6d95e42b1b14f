import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { chmod, lstat, mkdir, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from '../util/logger.js';
import { asStoreError, StoreError, type ErrorCode } from '../util/errors.js';

/**
 * The store's local control channel: a unix STREAM socket (mode 0600) speaking newline-delimited JSON.
 *   {"op":"addCredentials","data":{"<ref>":{"username","password","identityToken"}}} -> {"ok":true,"refs":N}
 *   {"op":"status"}                                                                   -> {"ok":true,"status":...}
 *   failures                                  -> {"ok":false,"error":{"code":"E_...","message":"..."}}
 * It replaces the Go store's gRPC `Controller/AddCredential`: c/image only runs our helper binary, so the
 * wire format is ours. Credentials go straight to the handler: never logged, never persisted.
 * This module imports nothing heavy so the helper binary starts fast.
 */

/** Default of the store's --addr and the helper's argument (Go store default; does not follow --root). */
export { DEFAULT_CONTROL_SOCKET } from '../util/root-layout.js';

export interface CredentialEntry {
  username?: string;
  password?: string;
  identityToken?: string;
}
/** Keyed by the image reference string c/image used (`host/repo:tag` or `host/repo@sha256:...`). */
export type CredentialMap = Record<string, CredentialEntry>;

export type ControlRequest =
  | { op: 'addCredentials'; data: CredentialMap }
  | { op: 'status' }
  | { op: 'pinAdd'; refs: string[]; platform?: string }
  | { op: 'pinRm'; refs: string[] }
  | { op: 'pinList' }
  | { op: 'check'; repair?: boolean };

export type ControlResponse =
  | { ok: true; refs?: number; status?: unknown; pins?: unknown; check?: unknown }
  | { ok: false; error: { code: string; message: string } };

export interface ControlHandler {
  addCredentials(map: CredentialMap): void | Promise<void>;
  status(): unknown;
  /** `stargz-store check --addr`: the cache check run by the store itself (absent: not offered). */
  check?(repair: boolean): Promise<unknown>;
  /** Pinned image sets (absent: the ops answer E_INVALID_ARGUMENT). */
  pins?: {
    add(refs: string[], platform?: string): Promise<unknown>;
    remove(refs: string[]): Promise<number>;
    list(): unknown;
  };
}

export interface ControlServer {
  readonly path: string;
  close(): Promise<void>;
}

export interface ControlServerOptions {
  logger?: Logger;
  /** Connections idle longer than this are closed (default 30 s). */
  idleTimeoutMs?: number;
  /** Largest accepted request line (default 1 MiB). */
  maxLineBytes?: number;
}

const MAX_REFS = 10_000;
const MAX_FIELD = 64 * 1024;
const FIELDS = ['username', 'password', 'identityToken'] as const;

/**
 * Validates the c/image additional-layer-store-auth-helper payload. Messages name the offending ref and
 * field, never a value. Entries with no fields (anonymous pulls send `{}`) carry nothing and are dropped.
 */
export function parseCredentialMap(value: unknown): CredentialMap {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new StoreError('E_INVALID_ARGUMENT', 'credentials must be a JSON object {"<ref>":{...}}');
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > MAX_REFS)
    throw new StoreError('E_INVALID_ARGUMENT', `too many refs (${entries.length})`);
  const out: CredentialMap = Object.create(null) as CredentialMap;
  for (const [ref, raw] of entries) {
    if (ref === '' || ref.length > 4096 || /[\s\0]/.test(ref)) {
      throw new StoreError('E_INVALID_ARGUMENT', 'credentials: invalid image reference key', {
        ref: ref.slice(0, 256),
      });
    }
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      throw new StoreError('E_INVALID_ARGUMENT', `credentials for ${ref}: must be an object`, { ref });
    }
    const entry: CredentialEntry = {};
    for (const f of FIELDS) {
      const v = (raw as Record<string, unknown>)[f];
      if (v === undefined || v === '') continue;
      if (typeof v !== 'string' || v.length > MAX_FIELD || v.includes('\0')) {
        throw new StoreError('E_INVALID_ARGUMENT', `credentials for ${ref}: field ${f} must be a string`, {
          ref,
          field: f,
        });
      }
      entry[f] = v;
    }
    if (Object.keys(entry).length > 0) out[ref] = entry;
  }
  return out;
}

function errorResponse(err: unknown): ControlResponse {
  const e = asStoreError(err, 'E_INVALID_ARGUMENT');
  return { ok: false, error: { code: e.code, message: e.message } };
}

/** Listens on `path` (a stale socket there is replaced; anything else there is an error). */
export async function startControlSocket(
  path: string,
  handler: ControlHandler,
  opts: ControlServerOptions = {},
): Promise<ControlServer> {
  const log = opts.logger;
  const idleMs = opts.idleTimeoutMs ?? 30_000;
  const maxLine = opts.maxLineBytes ?? 1024 * 1024;

  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  try {
    const st = await lstat(path);
    if (!st.isSocket()) {
      throw new StoreError('E_CONFIG', `--addr ${path} exists and is not a socket; refusing to replace it`, {
        path,
      });
    }
    await unlink(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw asStoreError(err, 'E_IO', { path });
  }

  const sockets = new Set<Socket>();
  const server: Server = createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    serveConnection(sock, handler, { idleMs, maxLine, log });
  });
  server.maxConnections = 64;

  // The socket file is created by bind(2) inside listen(); a restrictive umask around that call means
  // it never exists with looser permissions, even briefly.
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void => reject(asStoreError(err, 'E_IO', { path }));
    server.once('error', onError);
    const old = process.umask(0o177);
    try {
      server.listen(path, () => {
        server.off('error', onError);
        resolve();
      });
    } finally {
      process.umask(old);
    }
  });
  await chmod(path, 0o600);
  server.on('error', (err) => log?.error({ err, path }, 'control socket error'));
  log?.info({ path }, 'control socket listening');

  let closed: Promise<void> | undefined;
  return {
    path,
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }).then(() => unlink(path).catch(() => undefined));
      return closed;
    },
  };
}

function serveConnection(
  sock: Socket,
  handler: ControlHandler,
  o: { idleMs: number; maxLine: number; log: Logger | undefined },
): void {
  sock.setTimeout(o.idleMs, () => sock.destroy());
  sock.on('error', () => sock.destroy());
  let buf = '';
  let busy: Promise<void> = Promise.resolve();
  sock.setEncoding('utf8');
  sock.on('data', (chunk: string) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      // Requests on one connection are answered in order.
      // the idle timeout is for idle connections: a long request (check) must not be cut off
      busy = busy
        .then(() => {
          sock.setTimeout(0);
          return handleLine(line, handler, o.log);
        })
        .then((resp) => {
          if (!sock.destroyed) {
            sock.setTimeout(o.idleMs);
            sock.write(`${JSON.stringify(resp)}\n`);
          }
        });
    }
    if (buf.length > o.maxLine) {
      const resp = errorResponse(new StoreError('E_TOO_LARGE', `request larger than ${o.maxLine} bytes`));
      buf = '';
      sock.end(`${JSON.stringify(resp)}\n`);
    }
  });
}

async function handleLine(
  line: string,
  handler: ControlHandler,
  log: Logger | undefined,
): Promise<ControlResponse> {
  if (line.trim() === '') return errorResponse(new StoreError('E_INVALID_ARGUMENT', 'empty request'));
  let req: unknown;
  try {
    req = JSON.parse(line);
  } catch {
    return errorResponse(new StoreError('E_INVALID_ARGUMENT', 'request is not valid JSON'));
  }
  try {
    const op = (req as { op?: unknown } | null)?.op;
    if (op === 'addCredentials') {
      const map = parseCredentialMap((req as { data?: unknown }).data);
      await handler.addCredentials(map);
      const refs = Object.keys(map);
      // Refs only: the values are secrets.
      log?.info({ refs }, 'credentials received from helper');
      return { ok: true, refs: refs.length };
    }
    if (op === 'status') {
      return { ok: true, status: await handler.status() };
    }
    if (op === 'pinAdd' || op === 'pinRm' || op === 'pinList') return await handlePin(op, req, handler);
    if (op === 'check') {
      if (handler.check === undefined)
        throw new StoreError('E_INVALID_ARGUMENT', 'this store does not offer check');
      return { ok: true, check: await handler.check((req as { repair?: unknown }).repair === true) };
    }
    return errorResponse(
      new StoreError('E_INVALID_ARGUMENT', `unknown op ${JSON.stringify(op)}`.slice(0, 200)),
    );
  } catch (err) {
    return errorResponse(err);
  }
}

function refList(v: unknown): string[] {
  if (
    !Array.isArray(v) ||
    v.length === 0 ||
    v.length > MAX_REFS ||
    v.some((r) => typeof r !== 'string' || r === '' || r.length > 4096 || /[\s\0]/.test(r))
  ) {
    throw new StoreError('E_INVALID_ARGUMENT', 'refs must be a non-empty array of image references');
  }
  return v as string[];
}

async function handlePin(op: string, req: unknown, handler: ControlHandler): Promise<ControlResponse> {
  if (handler.pins === undefined) {
    throw new StoreError('E_INVALID_ARGUMENT', 'this store does not manage pinned images');
  }
  const r = req as { refs?: unknown; platform?: unknown };
  if (op === 'pinList') return { ok: true, pins: handler.pins.list() };
  if (op === 'pinRm') return { ok: true, refs: await handler.pins.remove(refList(r.refs)) };
  if (
    r.platform !== undefined &&
    (typeof r.platform !== 'string' || !/^[a-z0-9_./-]{1,64}$/.test(r.platform))
  ) {
    throw new StoreError('E_INVALID_ARGUMENT', 'platform must look like os/arch[/variant]');
  }
  return { ok: true, pins: await handler.pins.add(refList(r.refs), r.platform as string | undefined) };
}

export interface ControlClientOptions {
  /** Whole request budget (default 5 s). */
  timeoutMs?: number;
}

/**
 * Sends one request and returns the store's answer. A store that is not running gives StoreError E_IO
 * with a message saying so; an `ok:false` answer is returned as StoreError with the store's code.
 */
export async function controlRequest(
  path: string,
  request: ControlRequest,
  opts: ControlClientOptions = {},
): Promise<ControlResponse & { ok: true }> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const line = await new Promise<string>((resolve, reject) => {
    const sock = createConnection({ path });
    let data = '';
    let done = false;
    const finish = (err: Error | undefined, value?: string): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve(value ?? '');
    };
    const timer = setTimeout(
      () =>
        finish(
          new StoreError('E_DEADLINE', `store at ${path} did not answer within ${timeoutMs} ms`, { path }),
        ),
      timeoutMs,
    );
    sock.setEncoding('utf8');
    sock.on('connect', () => sock.write(`${JSON.stringify(request)}\n`));
    sock.on('data', (chunk: string) => {
      data += chunk;
      const nl = data.indexOf('\n');
      if (nl >= 0) finish(undefined, data.slice(0, nl));
    });
    sock.on('end', () =>
      finish(new StoreError('E_IO', `store at ${path} closed the connection without answering`, { path })),
    );
    sock.on('error', (err: NodeJS.ErrnoException) => {
      const notRunning = err.code === 'ENOENT' || err.code === 'ECONNREFUSED';
      const msg = notRunning
        ? `stargz-store is not running (no listener on ${path})`
        : err.code === 'EACCES'
          ? `permission denied on ${path} (the socket is root-only)`
          : `cannot reach stargz-store at ${path}: ${err.message}`;
      finish(new StoreError('E_IO', msg, { path, errno: err.code }, { cause: err }));
    });
  });
  let resp: ControlResponse;
  try {
    resp = JSON.parse(line) as ControlResponse;
  } catch {
    throw new StoreError('E_IO', `store at ${path} sent an invalid answer`, { path });
  }
  if (resp.ok !== true) {
    const code = (resp.error?.code ?? 'E_IO') as ErrorCode;
    throw new StoreError(code, resp.error?.message ?? 'request failed', { path });
  }
  return resp;
}
