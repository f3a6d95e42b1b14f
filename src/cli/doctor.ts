import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, readdir, readFile, stat, statfs } from 'node:fs/promises';
import { dirname, join, normalize } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { mountType } from '../fs/mount-util.js';
import { parseReference, type ImageRef } from '../registry/index.js';
import type { StoreConfig } from '../store/config.js';
// in process: a short-lived command, and the tests run it from source (no compiled worker)
import { loadConfig } from '../store/config/load.js';
import { controlRequest } from '../store/control-socket.js';
import { asStoreError } from '../util/errors.js';
import { checkCredentials, checkRegistry } from './doctor-registry.js';
import { formatBytes } from '../util/format-bytes.js';
import { CACHE_DEFAULTS } from '../util/defaults.js';

/**
 * `stargz-store doctor`: checks the node's set-up for lazy pulling, one line each with the fix.
 * The JSON form is stable (README.md "doctor"): `{ ok, checks: [{ id, status, message, fix? }] }`,
 * `status` one of pass, warn, fail, skip; `ok` is false when any check failed. Messages name files,
 * hosts and digests; never a credential.
 */

export type DoctorStatus = 'pass' | 'warn' | 'fail' | 'skip';

export interface DoctorCheck {
  id: string;
  status: DoctorStatus;
  message: string;
  fix?: string;
}

export interface DoctorReport {
  ok: boolean;
  checks: DoctorCheck[];
}

export interface DoctorOptions {
  mountpoint: string;
  addr: string;
  root: string;
  config?: string;
  ref?: string;
  /** storage.conf to read (default: $CONTAINERS_STORAGE_CONF or /etc/containers/storage.conf + drop-ins). */
  storageConf?: string;
  /** registries.conf to read (default: /etc/containers/registries.conf + drop-ins). */
  registriesConf?: string;
  /** Per network/child step (default 10 s). */
  timeoutMs?: number;
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<{ ok: boolean; out: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs }, (err, stdout, stderr) => {
      resolve({ ok: !err, out: (err ? String(stderr) || err.message : String(stdout)).trim() });
    });
  });
}

/** The file and its `*.conf` drop-ins (`<file>.d/`), in the order c/storage and c/image read them. */
async function withDropIns(file: string): Promise<string[]> {
  const dir = `${file}.d`;
  const extra = await readdir(dir).then(
    (n) => n.filter((x) => x.endsWith('.conf')).sort(),
    () => [],
  );
  return [file, ...extra.map((n) => join(dir, n))];
}

async function readToml(path: string): Promise<Record<string, unknown> | undefined> {
  try {
    return parseToml(await readFile(path, 'utf8')) as Record<string, unknown>;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** Like Go's filepath.Clean (what c/storage applies): no trailing slash, no `.`/`..` segments. */
function cleanPath(p: string): string {
  const n = normalize(p);
  return n.length > 1 ? n.replace(/\/+$/, '') : n;
}

async function checkStorageConf(o: DoctorOptions): Promise<DoctorCheck> {
  const id = 'storage-conf';
  const want = `${o.mountpoint}:ref`;
  const main = o.storageConf ?? process.env.CONTAINERS_STORAGE_CONF ?? '/etc/containers/storage.conf';
  const files = o.storageConf !== undefined ? [main] : await withDropIns(main);
  const fix = `add "${want}" to additionallayerstores under [storage.options] in ${main}`;
  const seen: string[] = [];
  for (const f of files) {
    let t: Record<string, unknown> | undefined;
    try {
      t = await readToml(f);
    } catch (err) {
      return { id, status: 'fail', message: `${f} cannot be parsed: ${(err as Error).message}`, fix };
    }
    const opts = (t?.storage as { options?: { additionallayerstores?: unknown } } | undefined)?.options;
    const stores = Array.isArray(opts?.additionallayerstores) ? opts.additionallayerstores : [];
    for (const s of stores) {
      if (typeof s !== 'string') continue;
      for (const one of s.split(',')) {
        const [path, ...flags] = one.split(':');
        seen.push(one);
        if (cleanPath(path ?? '') !== cleanPath(o.mountpoint)) continue;
        if (flags.includes('ref')) return { id, status: 'pass', message: `${f} lists ${one}` };
        return {
          id,
          status: 'fail',
          message: `${f} lists ${one} without :ref (stargz-store needs the image reference in the path)`,
          fix: `change it to "${want}"`,
        };
      }
    }
  }
  return {
    id,
    status: 'fail',
    message:
      seen.length === 0
        ? `no additionallayerstores in ${files.join(', ')}`
        : `additionallayerstores (${seen.join(', ')}) does not list ${o.mountpoint}`,
    fix,
  };
}

async function checkMount(o: DoctorOptions): Promise<DoctorCheck> {
  const id = 'mount';
  const type = await mountType(o.mountpoint).catch(() => undefined);
  if (type === undefined || !type.startsWith('fuse')) {
    return {
      id,
      status: 'fail',
      message: `${o.mountpoint} is not mounted (${type ?? 'no mount'}): the store is not running`,
      fix: 'start the store: systemctl start stargz-store (or stargz-store <mountpoint>)',
    };
  }
  // statfs from a child: never answered from the kernel's attribute cache (a plain stat of a dead
  // mount can still succeed for a second), and a stuck mount cannot hang the doctor itself
  const r = await run('stat', ['-f', '-c', '%t', '--', o.mountpoint], o.timeoutMs ?? 10_000);
  if (r.ok) return { id, status: 'pass', message: `${o.mountpoint} is a live FUSE mount` };
  const dead = /not connected/i.test(r.out);
  return {
    id,
    status: 'fail',
    message: dead
      ? `${o.mountpoint} is a dead FUSE mount (ENOTCONN): the store exited without unmounting; every podman/CRI-O storage command fails until it is cleaned up`
      : `${o.mountpoint} does not answer: ${r.out}`,
    fix: `umount -l ${o.mountpoint} (or fusermount -uz ${o.mountpoint}), then restart the store`,
  };
}

async function checkSocket(o: DoctorOptions): Promise<DoctorCheck> {
  const id = 'control-socket';
  try {
    const resp = await controlRequest(o.addr, { op: 'status' }, { timeoutMs: o.timeoutMs ?? 10_000 });
    const pid = (resp.status as { pid?: unknown } | undefined)?.pid;
    return { id, status: 'pass', message: `store pid ${String(pid ?? '?')} answers on ${o.addr}` };
  } catch (err) {
    return {
      id,
      status: 'fail',
      message: asStoreError(err).message,
      fix: `start the store with --addr ${o.addr} (or pass the --addr it uses)`,
    };
  }
}

async function checkDevFuse(): Promise<DoctorCheck> {
  const id = 'dev-fuse';
  try {
    const st = await stat('/dev/fuse');
    if (!st.isCharacterDevice()) throw new Error('not a character device');
    await access('/dev/fuse', constants.R_OK | constants.W_OK);
    return { id, status: 'pass', message: '/dev/fuse is present and usable' };
  } catch (err) {
    return {
      id,
      status: 'fail',
      message: `/dev/fuse: ${(err as Error).message}`,
      fix: 'modprobe fuse (containers: run with --device /dev/fuse)',
    };
  }
}

function versionAtLeast(v: string, major: number, minor: number): boolean {
  const m = /^(\d+)\.(\d+)/.exec(v);
  if (m === null) return false;
  return Number(m[1]) > major || (Number(m[1]) === major && Number(m[2]) >= minor);
}

async function checkAuthHelper(o: DoctorOptions): Promise<DoctorCheck> {
  const id = 'auth-helper';
  const pv = await run('podman', ['version', '--format', '{{.Client.Version}}'], o.timeoutMs ?? 10_000);
  if (!pv.ok) return { id, status: 'skip', message: 'podman not found (CRI-O passes no credentials)' };
  if (!versionAtLeast(pv.out, 5, 2)) {
    return {
      id,
      status: 'skip',
      message: `podman ${pv.out} < 5.2 passes no credentials to the store; it reads auth.json itself`,
    };
  }
  const main = o.registriesConf ?? '/etc/containers/registries.conf';
  const files = o.registriesConf !== undefined ? [main] : await withDropIns(main);
  let helper: string | undefined;
  for (const f of files) {
    const v = (await readToml(f).catch(() => undefined))?.['additional-layer-store-auth-helper'];
    if (typeof v === 'string' && v !== '') helper = v;
  }
  if (helper !== undefined) {
    return {
      id,
      status: 'pass',
      message: `podman ${pv.out}: additional-layer-store-auth-helper = "${helper}"`,
    };
  }
  return {
    id,
    status: 'fail',
    message: `podman ${pv.out} needs additional-layer-store-auth-helper in ${main} to pass credentials`,
    fix: `add the line additional-layer-store-auth-helper = "stargz-store-helper" (top level) to ${main}`,
  };
}

async function nearestDir(p: string): Promise<string> {
  for (let d = p; ; d = dirname(d)) {
    if (
      await stat(d).then(
        (s) => s.isDirectory(),
        () => false,
      )
    )
      return d;
    if (dirname(d) === d) return d;
  }
}

async function checkCache(o: DoctorOptions, config: StoreConfig | undefined): Promise<DoctorCheck> {
  const id = 'cache';
  const min = config?.cache.minFreeBytes ?? 1024 ** 3;
  const max = config?.cache.maxBytes ?? CACHE_DEFAULTS.maxBytes;
  const where = await nearestDir(o.root);
  try {
    const st = await statfs(where);
    const free = st.bavail * st.bsize;
    const bounds = `max_bytes ${max === 0 ? 'unbounded' : formatBytes(max)}, min_free_bytes ${formatBytes(min)}`;
    if (free < min) {
      return {
        id,
        status: 'fail',
        message: `${formatBytes(free)} free on ${where} is below min_free_bytes (${bounds}): nothing new is cached`,
        fix: 'free space on that filesystem or lower [cache] min_free_bytes',
      };
    }
    return { id, status: 'pass', message: `${formatBytes(free)} free on ${where}; ${bounds}` };
  } catch (err) {
    return { id, status: 'fail', message: `statfs ${where}: ${(err as Error).message}`, fix: 'check --root' };
  }
}

function checkRuntime(): DoctorCheck {
  const ok = versionAtLeast(process.versions.node, 20, 18);
  return ok
    ? {
        id: 'runtime',
        status: 'pass',
        message: `node ${process.version} on ${process.platform}/${process.arch}`,
      }
    : {
        id: 'runtime',
        status: 'fail',
        message: `node ${process.version} is older than 20.18`,
        fix: 'install Node.js 20.18 or newer',
      };
}

export async function runDoctorChecks(o: DoctorOptions): Promise<DoctorReport> {
  const checks: DoctorCheck[] = [];
  let config: StoreConfig | undefined;
  try {
    config = (
      await loadConfig({
        ...(o.config !== undefined ? { config: o.config } : {}),
        root: o.root,
        addr: o.addr,
        mountpoint: o.mountpoint,
      })
    ).config;
    checks.push({
      id: 'config',
      status: 'pass',
      message: `config ${config.configFile ?? '(defaults)'} is valid`,
    });
  } catch (err) {
    checks.push({
      id: 'config',
      status: 'fail',
      message: asStoreError(err).message,
      fix: 'fix the config file (the store refuses to start with it)',
    });
  }
  checks.push(await checkStorageConf(o));
  checks.push(await checkMount(o));
  checks.push(await checkSocket(o));
  checks.push(await checkDevFuse());
  checks.push(await checkAuthHelper(o));
  checks.push(await checkCache(o, config));
  checks.push(checkRuntime());
  if (o.ref !== undefined) {
    let ref: ImageRef | undefined;
    try {
      ref = parseReference(o.ref);
    } catch (err) {
      checks.push({
        id: 'ref',
        status: 'fail',
        message: asStoreError(err).message,
        fix: 'pass a valid --ref',
      });
    }
    if (ref !== undefined) {
      checks.push(await checkCredentials(ref, config));
      checks.push(...(await checkRegistry(ref, config, o.timeoutMs ?? 10_000)));
    }
  }
  return { ok: checks.every((c) => c.status !== 'fail'), checks };
}

export function formatDoctor(r: DoctorReport): string {
  const tag: Record<DoctorStatus, string> = { pass: 'ok  ', warn: 'WARN', fail: 'FAIL', skip: 'skip' };
  const lines = r.checks.map(
    (c) =>
      `${tag[c.status]} ${c.id}: ${c.message}${c.fix !== undefined && c.status !== 'pass' ? ` -> fix: ${c.fix}` : ''}`,
  );
  lines.push(
    r.ok ? 'all checks passed' : `${r.checks.filter((c) => c.status === 'fail').length} check(s) failed`,
  );
  return lines.join('\n') + '\n';
}
