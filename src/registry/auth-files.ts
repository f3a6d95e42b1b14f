import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { StoreError } from '../util/errors.js';
import type { CredentialProvider, CredentialQuery, Credentials } from './credentials.js';
import { DOCKER_HUB } from './reference.js';

const DOCKER_HUB_KEYS = [
  'docker.io',
  'index.docker.io',
  'registry-1.docker.io',
  'https://index.docker.io/v1/',
];
/** The server URL docker credential helpers know Docker Hub by. */
const DOCKER_HUB_SERVER = 'https://index.docker.io/v1/';

export interface AuthFileOptions {
  /** Files in lookup order; default: containers auth.json locations, then docker config. */
  paths?: string[];
  env?: NodeJS.ProcessEnv;
  /** Seconds a parsed file is reused before it is read again (picks up `podman login`). */
  reloadAfterMs?: number;
  helperTimeoutMs?: number;
  /** Directory searched for `docker-credential-*` before $PATH (tests). */
  helperDir?: string;
}

/**
 * containers/image's order (`pkg/docker/config`), then docker's config.json:
 * $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json (root: /run/containers/0/auth.json),
 * $XDG_CONFIG_HOME/containers/auth.json, /etc/containers/auth.json, $DOCKER_CONFIG/config.json
 * (~/.docker/config.json), ~/.dockercfg.
 */
export function defaultAuthFilePaths(env: NodeJS.ProcessEnv = process.env): string[] {
  const home = env.HOME || homedir();
  const uid = typeof process.getuid === 'function' ? process.getuid() : 0;
  const out: string[] = [];
  if (env.REGISTRY_AUTH_FILE) out.push(env.REGISTRY_AUTH_FILE);
  out.push(
    join(
      env.XDG_RUNTIME_DIR || `/run/containers/${uid}`,
      env.XDG_RUNTIME_DIR ? 'containers/auth.json' : 'auth.json',
    ),
  );
  out.push(join(env.XDG_CONFIG_HOME || join(home, '.config'), 'containers/auth.json'));
  out.push('/etc/containers/auth.json');
  out.push(join(env.DOCKER_CONFIG || join(home, '.docker'), 'config.json'));
  out.push(join(home, '.dockercfg'));
  return [...new Set(out)];
}

interface AuthEntry {
  auth?: string;
  username?: string;
  password?: string;
  identitytoken?: string;
}

interface ParsedFile {
  auths: Map<string, AuthEntry>;
  credHelpers: Map<string, string>;
  credsStore?: string;
}

/** `https://index.docker.io/v1/` -> `docker.io`; `host/ns/repo` keys keep their path. */
function normaliseAuthKey(key: string): string {
  let k = key.trim();
  const hadScheme = /^https?:\/\//.test(k);
  k = k.replace(/^https?:\/\//, '').replace(/\/+$/, '');
  // docker's config keys are URLs whose path (/v1, /v2) is not a namespace
  if (hadScheme) k = k.split('/')[0]!;
  if (DOCKER_HUB_KEYS.includes(k) || k === 'index.docker.io' || k === 'registry-1.docker.io')
    return DOCKER_HUB;
  for (const h of ['index.docker.io/', 'registry-1.docker.io/'])
    if (k.startsWith(h)) k = `${DOCKER_HUB}/${k.slice(h.length)}`;
  return k;
}

function parseAuthFile(text: string, path: string): ParsedFile {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new StoreError('E_CONFIG', `credentials file is not JSON`, { path });
  }
  const out: ParsedFile = { auths: new Map(), credHelpers: new Map() };
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return out;
  const obj = json as Record<string, unknown>;
  // ~/.dockercfg (legacy) is the auths map itself
  const auths =
    typeof obj.auths === 'object' && obj.auths !== null
      ? (obj.auths as Record<string, unknown>)
      : path.endsWith('.dockercfg')
        ? obj
        : {};
  for (const [k, v] of Object.entries(auths)) {
    if (typeof v === 'object' && v !== null) out.auths.set(normaliseAuthKey(k), v as AuthEntry);
  }
  if (typeof obj.credHelpers === 'object' && obj.credHelpers !== null) {
    for (const [k, v] of Object.entries(obj.credHelpers as Record<string, unknown>)) {
      if (typeof v === 'string' && v !== '') out.credHelpers.set(normaliseAuthKey(k), v);
    }
  }
  if (typeof obj.credsStore === 'string' && obj.credsStore !== '') out.credsStore = obj.credsStore;
  return out;
}

function entryCredentials(e: AuthEntry): Credentials | undefined {
  if (typeof e.identitytoken === 'string' && e.identitytoken !== '')
    return { identityToken: e.identitytoken };
  if (typeof e.auth === 'string' && e.auth !== '') {
    const decoded = Buffer.from(e.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon <= 0) return undefined;
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  if (typeof e.username === 'string' && typeof e.password === 'string' && e.username !== '') {
    return { username: e.username, password: e.password };
  }
  return undefined;
}

/**
 * Reads containers `auth.json` and docker `config.json` files (including `credHelpers` and
 * `credsStore`, run as `docker-credential-<name> get` without blocking the event loop).
 * Keys may be `host` or `host/namespace/repo`; the longest match wins.
 */
export class AuthFileProvider implements CredentialProvider {
  readonly name = 'auth-files';
  private readonly paths: string[];
  private readonly cache = new Map<string, { at: number; file: ParsedFile | undefined }>();
  private readonly helperCache = new Map<string, { at: number; creds: Credentials | undefined }>();
  private readonly reloadAfterMs: number;
  private readonly helperTimeoutMs: number;

  constructor(private readonly opts: AuthFileOptions = {}) {
    this.paths = opts.paths ?? defaultAuthFilePaths(opts.env);
    this.reloadAfterMs = opts.reloadAfterMs ?? 5000;
    this.helperTimeoutMs = opts.helperTimeoutMs ?? 10_000;
  }

  private async load(path: string): Promise<ParsedFile | undefined> {
    const hit = this.cache.get(path);
    if (hit && Date.now() - hit.at < this.reloadAfterMs) return hit.file;
    let file: ParsedFile | undefined;
    try {
      file = parseAuthFile(await readFile(path, 'utf8'), path);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR' && code !== 'EACCES') throw err;
      file = undefined;
    }
    this.cache.set(path, { at: Date.now(), file });
    return file;
  }

  async get(q: CredentialQuery, signal?: AbortSignal): Promise<Credentials | undefined> {
    const host = normaliseAuthKey(q.host);
    const name = `${host}/${q.repository}`;
    for (const path of this.paths) {
      const f = await this.load(path);
      if (!f) continue;
      const helper = f.credHelpers.get(host);
      if (helper) {
        const c = await this.runHelper(helper, host, signal);
        if (c) return c;
      }
      let best: { len: number; entry: AuthEntry } | undefined;
      for (const [k, entry] of f.auths) {
        if ((name === k || name.startsWith(`${k}/`)) && (!best || k.length > best.len))
          best = { len: k.length, entry };
      }
      const c = best && entryCredentials(best.entry);
      if (c) return c;
      if (f.credsStore) {
        const s = await this.runHelper(f.credsStore, host, signal);
        if (s) return s;
      }
    }
    return undefined;
  }

  private async runHelper(
    helper: string,
    host: string,
    signal?: AbortSignal,
  ): Promise<Credentials | undefined> {
    if (!/^[A-Za-z0-9._-]+$/.test(helper)) {
      throw new StoreError('E_CONFIG', 'invalid credential helper name', { helper: helper.slice(0, 60) });
    }
    const server = host === DOCKER_HUB ? DOCKER_HUB_SERVER : host;
    const key = `${helper}\n${server}`;
    const hit = this.helperCache.get(key);
    if (hit && Date.now() - hit.at < 60_000) return hit.creds;
    const bin = `docker-credential-${helper}`;
    const env = { ...(this.opts.env ?? process.env) };
    if (this.opts.helperDir) env.PATH = `${this.opts.helperDir}:${env.PATH ?? ''}`;
    const { code, stdout } = await runWithStdin(bin, ['get'], server, env, this.helperTimeoutMs, signal);
    let creds: Credentials | undefined;
    if (code === 0) {
      let out: unknown;
      try {
        out = JSON.parse(stdout);
      } catch {
        throw new StoreError('E_CONFIG', `credential helper ${bin} printed invalid JSON`, { helper });
      }
      const o = (out ?? {}) as Record<string, unknown>;
      const user = typeof o.Username === 'string' ? o.Username : '';
      const secret = typeof o.Secret === 'string' ? o.Secret : '';
      if (secret !== '')
        creds =
          user === '<token>' || user === ''
            ? { identityToken: secret }
            : { username: user, password: secret };
    } else if (!/credentials not found/i.test(stdout)) {
      // stdout/stderr are not included: helpers may echo secrets
      throw new StoreError('E_CONFIG', `credential helper ${bin} failed (exit ${code})`, {
        helper,
        exitCode: code,
      });
    }
    this.helperCache.set(key, { at: Date.now(), creds });
    return creds;
  }
}

function runWithStdin(
  bin: string,
  args: string[],
  input: string,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { env, stdio: ['pipe', 'pipe', 'ignore'], timeout: timeoutMs, signal });
    const chunks: Buffer[] = [];
    let size = 0;
    child.stdout.on('data', (b: Buffer) => {
      size += b.length;
      if (size <= 1 << 20) chunks.push(b);
    });
    child.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT')
        reject(new StoreError('E_CONFIG', `credential helper ${bin} not found`, { helper: bin }));
      else
        reject(
          new StoreError('E_CONFIG', `credential helper ${bin}: ${err.code ?? err.name}`, { helper: bin }),
        );
    });
    child.once('close', (code, sig) => {
      if (sig)
        reject(new StoreError('E_DEADLINE', `credential helper ${bin} killed (${sig})`, { helper: bin }));
      else resolve({ code: code ?? 1, stdout: Buffer.concat(chunks).toString('utf8') });
    });
    child.stdin.on('error', () => {
      /* helper exited early; its exit code tells */
    });
    child.stdin.end(input);
  });
}
