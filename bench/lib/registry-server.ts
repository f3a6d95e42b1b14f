import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { onCleanup } from './cleanup.js';
import { sleep, tail } from './proc.js';

/**
 * The benchmark's registry: Debian's docker-registry (distribution 2.8) with a generated config,
 * plain HTTP on one address only (127.0.0.1, or an address inside a namespace the harness made).
 * Its access log (stdout, combined log format) is the source of the "registry bytes and requests".
 */

export interface AccessRecord {
  /** Index in the log (monotonic), for slicing per measurement window. */
  seq: number;
  method: string;
  path: string;
  status: number;
  /** Response body bytes as logged; HEAD responses count 0 (Go discards HEAD bodies). */
  bytes: number;
  userAgent: string;
}

// 127.0.0.1 - - [22/Nov/2026:02:49:44 +0000] "GET /v2/ HTTP/1.1" 200 2 "" "curl/7.88.1"
const ACCESS_RE = /^\S+ \S+ \S+ \[[^\]]*\] "([A-Z]+) (\S+) [^"]*" (\d{3}) (\d+|-) "[^"]*" "([^"]*)"/;

/** Parse one combined-log-format line; anything else (the registry's own logs) gives undefined. */
export function parseAccessLine(line: string): Omit<AccessRecord, 'seq'> | undefined {
  const m = ACCESS_RE.exec(line);
  if (!m) return undefined;
  const method = m[1]!;
  const size = m[4] === '-' ? 0 : Number(m[4]);
  return {
    method,
    path: m[2]!,
    status: Number(m[3]),
    bytes: method === 'HEAD' ? 0 : size,
    userAgent: m[5]!,
  };
}

export interface Usage {
  requests: number;
  bytes: number;
  /** Blob GETs (full or ranged) only. */
  blobRequests: number;
  blobBytes: number;
  /** Bytes per client, keyed by a short user-agent class (podman / other). */
  byClient: Record<string, { requests: number; bytes: number }>;
}

/** Aggregate access records (pure). */
export function summarizeAccess(records: readonly Omit<AccessRecord, 'seq'>[]): Usage {
  const u: Usage = { requests: 0, bytes: 0, blobRequests: 0, blobBytes: 0, byClient: {} };
  for (const r of records) {
    u.requests++;
    u.bytes += r.bytes;
    if (r.method === 'GET' && /\/blobs\/sha256:[0-9a-f]{64}$/.test(r.path.split('?')[0]!)) {
      u.blobRequests++;
      u.blobBytes += r.bytes;
    }
    const client = clientClass(r.userAgent);
    const c = (u.byClient[client] ??= { requests: 0, bytes: 0 });
    c.requests++;
    c.bytes += r.bytes;
  }
  return u;
}

/** Blob GET requests and bytes per blob digest (pure): what a window fetched of each layer. */
export function blobUsage(
  records: readonly Omit<AccessRecord, 'seq'>[],
): Record<string, { requests: number; bytes: number }> {
  const out: Record<string, { requests: number; bytes: number }> = {};
  for (const r of records) {
    if (r.method !== 'GET') continue;
    const m = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(r.path.split('?')[0]!);
    if (!m) continue;
    const b = (out[m[1]!] ??= { requests: 0, bytes: 0 });
    b.requests++;
    b.bytes += r.bytes;
  }
  return out;
}

export function clientClass(userAgent: string): string {
  if (userAgent.includes('containers/') || userAgent.includes('podman') || userAgent.includes('skopeo'))
    return 'podman';
  if (userAgent === '' || userAgent === '-') return 'unknown';
  return userAgent.split(/[ /]/)[0]!.toLowerCase();
}

export interface BenchRegistry {
  /** host:port as clients address it. */
  readonly host: string;
  readonly pid: number;
  /** Current end of the access log, to slice a measurement window with `usageSince`. */
  mark(): number;
  records(from: number, to?: number): AccessRecord[];
  /** Wait until no new access line arrived for `quietMs` (lines are written when responses end). */
  settle(quietMs?: number, maxMs?: number): Promise<void>;
  usageSince(from: number, to?: number): Usage;
  stop(): Promise<void>;
}

export interface RegistryLaunch {
  /** Filesystem root for blobs; keep it across runs to reuse pushed images. */
  dataDir: string;
  /** Where config.yml goes. */
  confDir: string;
  /** Listen address (default 127.0.0.1). */
  address?: string;
  /** Port (default: a free one on 127.0.0.1; pass one explicitly when `netns` is set). */
  port?: number;
  /** Run inside this named network namespace (nsenter --net=/run/netns/<name>). */
  netns?: string;
}

export async function freePort(host = '127.0.0.1'): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const a = srv.address();
      srv.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

export function registryConfig(dataDir: string, addr: string, level = 'warn'): string {
  return [
    'version: 0.1',
    'log:',
    `  level: ${level}`,
    '  accesslog:',
    '    disabled: false',
    'storage:',
    '  cache:',
    '    blobdescriptor: inmemory',
    '  filesystem:',
    `    rootdirectory: ${dataDir}`,
    '  delete:',
    '    enabled: true',
    'http:',
    `  addr: ${addr}`,
    // a fixed secret silences the warning; uploads never cross instances here
    '  secret: sgz-bench-local-only',
    'health:',
    '  storagedriver:',
    '    enabled: false',
    '',
  ].join('\n');
}

export async function startBenchRegistry(opts: RegistryLaunch): Promise<BenchRegistry> {
  const address = opts.address ?? '127.0.0.1';
  const port = opts.port ?? (await freePort(address));
  const host = `${address}:${port}`;
  await mkdir(opts.dataDir, { recursive: true });
  await mkdir(opts.confDir, { recursive: true });
  const conf = join(opts.confDir, `registry-${port}.yml`);
  // info level only in a namespace: the "listening on" line is then the readiness signal
  await writeFile(conf, registryConfig(opts.dataDir, host, opts.netns ? 'info' : 'warn'));
  const argv = ['/usr/bin/docker-registry', 'serve', conf];
  const [cmd, ...args] = opts.netns ? ['nsenter', `--net=/run/netns/${opts.netns}`, ...argv] : argv;
  const child: ChildProcess = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const records: AccessRecord[] = [];
  let errText = '';
  let lastLineAt = performance.now();
  let partial = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (d: string) => {
    const lines = (partial + d).split('\n');
    partial = lines.pop() ?? '';
    for (const l of lines) {
      const r = parseAccessLine(l);
      if (r) records.push({ seq: records.length, ...r });
    }
    lastLineAt = performance.now();
  });
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => {
    errText = (errText + d).slice(-20000);
  });
  let exited = false;
  const exitedP = new Promise<void>((r) =>
    child.once('exit', () => {
      exited = true;
      r();
    }),
  );
  const stopNow = async () => {
    if (!exited) {
      child.kill('SIGTERM');
      await Promise.race([exitedP, sleep(5000)]);
      if (!exited) child.kill('SIGKILL');
      await exitedP;
    }
    // one config per port: without this every run left one behind in the work dir
    await rm(conf, { force: true });
  };
  const undo = onCleanup(`registry ${host}`, stopNow);
  const dialHost = address;
  const deadline = performance.now() + 20_000;
  while (true) {
    if (exited) {
      await undo();
      throw new StoreError('E_IO', `docker-registry exited during start-up: ${tail(errText)}`, { host });
    }
    if (performance.now() > deadline) {
      await undo();
      throw new StoreError('E_DEADLINE', `docker-registry did not listen on ${host}: ${tail(errText)}`, {
        host,
      });
    }
    // from a namespace we cannot dial directly: trust the log line instead
    if (opts.netns ? /listening on/.test(errText) : await canConnect(dialHost, port)) break;
    await sleep(50);
  }
  return {
    host,
    pid: child.pid ?? -1,
    mark: () => records.length,
    records: (from, to) => records.slice(from, to),
    usageSince: (from, to) => summarizeAccess(records.slice(from, to)),
    async settle(quietMs = 300, maxMs = 5000) {
      const end = performance.now() + maxMs;
      while (performance.now() < end && performance.now() - lastLineAt < quietMs) await sleep(50);
    },
    stop: undo,
  };
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, host);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
