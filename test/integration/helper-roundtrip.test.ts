import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  controlRequest,
  DEFAULT_CONTROL_SOCKET,
  startControlSocket,
  type ControlServer,
  type CredentialMap,
} from '../../src/store/control-socket.js';
import { formatStatusTable, normalizeStatus, runStatus } from '../../src/cli/status-command.js';
import { isStoreError } from '../../src/util/errors.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const HELPER = join(REPO, 'bin/stargz-store-helper.js');

interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function runHelper(args: string[], stdin: string): Promise<RunResult> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [HELPER, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr, ms: performance.now() - t0 }));
    child.stdin.end(stdin);
  });
}

/** A fake store: what the control socket hands over, plus everything logged. */
function fakeStore() {
  const received: CredentialMap[] = [];
  let logText = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      logText += chunk.toString();
      cb();
    },
  });
  const logger = pino({ level: 'trace' }, sink);
  const layers = [
    {
      ref: '127.0.0.1:5000/app:v1',
      digest: 'sha256:' + 'a'.repeat(64),
      format: 'estargz',
      lazy: true,
      bytesFetched: 1536,
      totalBytes: 4096,
      percent: 37.5,
      verified: false,
      lastError: null,
      refs: 1,
    },
    {
      ref: '127.0.0.1:5000/plain:v1',
      digest: 'sha256:' + 'b'.repeat(64),
      format: 'gzip',
      lazy: false,
      reason: 'no TOC annotation',
      bytesFetched: 0,
      percent: 0,
      verified: false,
      lastError: 'E_UNSUPPORTED_FORMAT: not an eStargz blob',
      refs: 0,
    },
  ];
  return {
    received,
    logger,
    log: () => logText,
    handler: {
      addCredentials: (m: CredentialMap) => {
        received.push(m);
      },
      status: () => ({ pid: 4242, mountpoint: '/mnt/store', layers }),
    },
    layers,
  };
}

describe('control socket + stargz-store-helper', () => {
  let dir: string;
  let sock: string;
  let server: ControlServer;
  let store: ReturnType<typeof fakeStore>;

  beforeAll(() => {
    if (!existsSync(join(REPO, 'dist/src/cli/helper-main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
  });
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'helper-'));
    sock = join(dir, 'store.sock');
    store = fakeStore();
    server = await startControlSocket(sock, store.handler, { logger: store.logger });
  });
  afterEach(async () => {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('creates the socket with mode 0600', async () => {
    const st = await stat(sock);
    expect(st.isSocket()).toBe(true);
    expect(st.mode & 0o777).toBe(0o600);
  });

  it('round trip: helper stdin credentials reach the store, and no secret is logged or printed', async () => {
    const payload = {
      '127.0.0.1:5000/app:v1': { username: 'alice', password: 'pa55-SECRET-word' },
      'registry.example.com/team/tool@sha256:0000000000000000000000000000000000000000000000000000000000000000':
        {
          identityToken: 'IDTOKEN-SECRET-123',
        },
    };
    const r = await runHelper([sock], JSON.stringify(payload));
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(store.received).toEqual([payload]);
    const everything = store.log() + r.stdout + r.stderr;
    expect(everything).toContain('127.0.0.1:5000/app:v1'); // refs are logged ...
    expect(everything).not.toContain('pa55-SECRET-word'); // ... secrets never
    expect(everything).not.toContain('IDTOKEN-SECRET-123');
    expect(everything).not.toContain('alice');
    // c/image blocks the pull on the helper: it must be quick (node start-up dominates).
    expect(r.ms).toBeLessThan(3000);
    console.log(`helper round trip: ${r.ms.toFixed(0)} ms`);
  });

  it('anonymous pulls ({} entries) are accepted and carry nothing', async () => {
    const r = await runHelper([sock], '{"docker.io/library/alpine:latest":{}}');
    expect(r.code).toBe(0);
    expect(store.received).toEqual([{}]);
  });

  it('invalid JSON: exit 1 with a clear message, nothing sent', async () => {
    const r = await runHelper([sock], '{"ref": {"username": "bob", "password": "oops-SECRET"');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^stargz-store-helper: stdin is not valid JSON/);
    expect(r.stderr).not.toContain('oops-SECRET');
    expect(store.received).toEqual([]);
  });

  it('wrong shapes: exit 1 naming the field, never the value', async () => {
    const r = await runHelper(
      [sock],
      JSON.stringify({ 'reg.example/a:1': { username: 'bob', password: 12345 } }),
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/field password must be a string/);
    expect(r.stderr).not.toContain('12345');
    const r2 = await runHelper([sock], '["not", "a", "map"]');
    expect(r2.code).toBe(1);
    expect(r2.stderr).toMatch(/must be a JSON object/);
    expect(store.received).toEqual([]);
  });

  it('store not running: exit 1 saying so (no socket, and a stale socket file)', async () => {
    const r = await runHelper([join(dir, 'absent.sock')], '{}');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/stargz-store is not running \(no listener on .*absent\.sock\)/);

    // A socket file left by a dead store (python binds without listening): connect gives ECONNREFUSED.
    const stale = join(dir, 'stale.sock');
    await deadSocket(stale);
    expect((await stat(stale)).isSocket()).toBe(true);
    const r2 = await runHelper([stale], '{}');
    expect(r2.code).toBe(1);
    expect(r2.stderr).toMatch(/not running/);
  });

  it('uses the Go default socket path without arguments', async () => {
    const r = await runHelper([], '{}');
    if (existsSync(DEFAULT_CONTROL_SOCKET)) {
      // A real store runs on this machine; an empty map is harmless.
      expect(r.code).toBe(0);
    } else {
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(DEFAULT_CONTROL_SOCKET);
    }
  });

  it('status over the socket returns the store view; the table and JSON render every field', async () => {
    const resp = await controlRequest(sock, { op: 'status' });
    expect(resp.status).toEqual({ pid: 4242, mountpoint: '/mnt/store', layers: store.layers });

    const json = JSON.parse(await runStatus({ addr: sock, json: true })) as unknown;
    expect(json).toEqual({ pid: 4242, mountpoint: '/mnt/store', layers: store.layers });

    const table = await runStatus({ addr: sock, trunc: false });
    const lines = table.trimEnd().split('\n');
    expect(lines[0]).toBe('stargz-store pid 4242 mounted at /mnt/store');
    expect(lines[1]!.split(/\s{2,}/)).toEqual([
      'REF',
      'DIGEST',
      'FORMAT',
      'LAZY',
      'FETCHED',
      'PERCENT',
      'VERIFIED',
      'REFS',
      'LAST ERROR',
    ]);
    expect(lines[2]!.split(/\s{2,}/)).toEqual([
      '127.0.0.1:5000/app:v1',
      'sha256:' + 'a'.repeat(64),
      'estargz',
      'yes',
      '1.5 KiB/4.0 KiB',
      '37.5%',
      'no',
      '1',
      '-',
    ]);
    expect(lines[3]!.split(/\s{2,}/)).toEqual([
      '127.0.0.1:5000/plain:v1',
      'sha256:' + 'b'.repeat(64),
      'gzip',
      'no (no TOC annotation)',
      '0 B',
      '0.0%',
      'no',
      '0',
      'E_UNSUPPORTED_FORMAT: not an eStargz blob',
    ]);
    // Default output shortens digests to 12 hex digits.
    expect(await runStatus({ addr: sock })).toContain(`sha256:${'a'.repeat(12)} `);
  });

  it('status of a store that is not running is a typed error', async () => {
    const err = await runStatus({ addr: join(dir, 'none.sock') }).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_IO')).toBe(true);
    expect((err as Error).message).toMatch(/not running/);
  });

  it('answers bad requests with typed errors and keeps serving', async () => {
    const lines = await rawExchange(
      sock,
      ['not json', '{"op":"nope"}', '{"op":"addCredentials","data":[1]}', '{"op":"status"}'],
      4,
    );
    const answers = lines.map((l) => JSON.parse(l) as { ok: boolean; error?: { code: string } });
    expect(answers.map((a) => a.ok)).toEqual([false, false, false, true]);
    expect(answers.slice(0, 3).map((a) => a.error?.code)).toEqual([
      'E_INVALID_ARGUMENT',
      'E_INVALID_ARGUMENT',
      'E_INVALID_ARGUMENT',
    ]);
  });

  it('rejects an oversized request line and closes the connection', async () => {
    const big = '{"op":"addCredentials","data":{"x":{"password":"' + 'p'.repeat(1100 * 1024);
    const lines = await rawExchange(sock, [big], 1, false);
    expect(JSON.parse(lines[0]!)).toMatchObject({ ok: false, error: { code: 'E_TOO_LARGE' } });
    expect(store.received).toEqual([]);
  });

  it('replaces a stale socket on start but refuses to delete a regular file', async () => {
    await server.close();
    // Node removes its socket on close; leave a dead socket file behind, as a crash would.
    await deadSocket(sock);
    server = await startControlSocket(sock, store.handler);
    const resp = await controlRequest(sock, { op: 'status' });
    expect(resp.ok).toBe(true);

    const file = join(dir, 'regular');
    await writeFile(file, 'keep me');
    const err = await startControlSocket(file, store.handler).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
    expect((await stat(file)).isFile()).toBe(true);
  });
});

describe('status rendering', () => {
  it('accepts a bare layer array and prints a hint when nothing is resolved', () => {
    expect(normalizeStatus([{ ref: 'r' }]).layers).toHaveLength(1);
    expect(formatStatusTable({ layers: [] })).toBe('no layers resolved yet\n');
  });
});

/** Writes request lines on one connection and collects `expect` answer lines. */
function rawExchange(
  path: string,
  requests: string[],
  expectLines: number,
  newline = true,
): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const c = createConnection({ path });
    let buf = '';
    const timer = setTimeout(() => {
      c.destroy();
      reject(new Error(`timeout; got ${JSON.stringify(buf)}`));
    }, 5000);
    c.on('connect', () => {
      for (const r of requests) c.write(newline ? `${r}\n` : r);
    });
    c.on('data', (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n').filter((l) => l !== '');
      if (lines.length >= expectLines) {
        clearTimeout(timer);
        c.destroy();
        resolve(lines);
      }
    });
    c.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

/** A socket file nobody listens on (what a killed store leaves behind). */
function deadSocket(path: string): Promise<void> {
  return new Promise<void>((res, rej) => {
    const py = spawn('python3', [
      '-c',
      'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])',
      path,
    ]);
    py.on('error', rej);
    py.on('close', (c) => (c === 0 ? res() : rej(new Error(`python bind exit ${String(c)}`))));
  });
}
