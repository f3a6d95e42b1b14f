import { readFile } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { parse as parseToml, TomlError, type TomlTable } from 'smol-toml';
import { formatPlatform, hostPlatform } from '../registry/platform.js';
import { StoreError } from '../util/errors.js';
import { DEFAULT_CONTROL_SOCKET } from './control-socket.js';
import { parseMetricsAddress } from './metrics-server.js';

/**
 * The store's one typed configuration: defaults <- config.toml <- command-line flags, validated once at
 * start-up. Keys of the Go stargz-store keep their names, defaults and "zero means default" rule
 * (stargz-format.md §6.1) so an existing config.toml works unchanged; keys that have no effect here are
 * accepted and reported as `notes` (logged at debug). Our own keys are grouped in [cache], [deadlines],
 * [platform] and [registry]. Unknown keys become `warnings`; a bad value throws StoreError E_CONFIG whose
 * message names the key.
 */

export const DEFAULT_CONFIG_PATH = '/etc/stargz-store/config.toml';
export const DEFAULT_ROOT = '/var/lib/stargz-store';
/** Like Go, the default socket does not follow --root. */
export const DEFAULT_ADDR = DEFAULT_CONTROL_SOCKET;
export const DEFAULT_REGISTRIES_CONF = '/etc/containers/registries.conf';

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** sun_path is 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

export interface MirrorConfig {
  /** host[:port] (no scheme). */
  host: string;
  /** Plain HTTP (and no TLS verification) for this mirror. */
  insecure: boolean;
  /** 0 = [resolver] request_timeout_sec; < 0 = no timeout (Go semantics). */
  requestTimeoutSec: number;
  /** Extra request headers. */
  header: Record<string, string[]>;
  /** TLS files for this mirror (our extension; absent when not configured). */
  tls?: TlsFiles;
  /** `ranged_reads = "split" | "next-host"` (absent: "mirror", the default); see registry/hosts.ts. */
  rangedReads?: 'split' | 'next-host';
  /** `ns_query = false`: no `?ns=<registry>` for this mirror (absent: sent). */
  nsQuery?: false;
}

/**
 * CA certificates added to the system roots, and a client certificate + key for mutual TLS, as
 * absolute PEM file paths (`ca_file` = "path" or ["paths"], `cert_file`, `key_file`).
 */
export interface TlsFiles {
  caFiles?: string[];
  certFile?: string;
  keyFile?: string;
}

export interface StoreConfig {
  /** Where the file came from (undefined when the default path was absent). */
  configFile: string | undefined;
  mountpoint: string;
  root: string;
  addr: string;
  logLevel: LogLevel;

  // Go top-level keys.
  httpCacheType: 'disk' | 'memory';
  filesystemCacheType: 'disk' | 'memory';
  /** How long an unused resolved layer (no use count, no open file) stays open. */
  resolveResultEntryTtlSec: number;
  prefetchSize: number;
  prefetchTimeoutSec: number;
  prefetchAsyncSize: number;
  noprefetch: boolean;
  noBackgroundFetch: boolean;
  /** FUSE request debug log: Go's top-level `debug = true`, or `[debug] fuse = true`. */
  debug: boolean;
  /**
   * `[debug] record_accesses` / `--record-accesses`: absolute path of a JSON-lines file that gets one
   * line per first open (and first readlink) of each file of a layer's diff; '' = off.
   */
  recordAccesses: string;
  allowNoVerification: boolean;
  maxConcurrency: number;
  /** Layers whose TOC has more entries are refused early (E_TOO_MANY_ENTRIES): clients pull them. */
  maxTocEntries: number;
  noPrometheus: boolean;
  logFileAccess: boolean;
  metadataStore: 'memory' | 'db';
  /** `metrics_address` / `--metrics-address`: host:port of the Prometheus `/metrics` endpoint; '' = off. */
  metricsAddress: string;

  blob: {
    validIntervalSec: number;
    checkAlways: boolean;
    chunkSize: number;
    fetchingTimeoutSec: number;
    forceSingleRangeMode: boolean;
    prefetchChunkSize: number;
    maxRetries: number;
    minWaitMsec: number;
    maxWaitMsec: number;
  };
  directoryCache: {
    maxLruCacheEntry: number;
    maxCacheFds: number;
    syncAdd: boolean;
    direct: boolean;
    fadvDontneed: boolean;
  };
  fuse: {
    attrTimeout: number;
    entryTimeout: number;
    passthrough: boolean;
    mergeBufferSize: number;
    mergeWorkerCount: number;
  };
  kubeconfigKeychain: { enableKeychain: boolean; kubeconfigPath: string };
  resolver: {
    requestTimeoutSec: number;
    /** Upstream host -> mirrors in order, and TLS files for the host itself (our extension). */
    hosts: Record<string, { mirrors: MirrorConfig[]; tls?: TlsFiles }>;
  };

  // Ours.
  cache: {
    /** Disk bound of the chunk cache; 0 = no byte limit (only min_free_bytes applies). */
    maxBytes: number;
    /** Evict while the cache filesystem has less free space than this; 0 = no margin. */
    minFreeBytes: number;
    /** In-memory LRU in front of the disk cache; 0 = none. */
    memoryBytes: number;
  };
  background: {
    /**
     * Background fetch waits this long after the last on-demand fetch (store-wide) and after the
     * last read of the layer; ms.
     */
    quietMs: number;
    /** Background network bytes per second, store-wide; 0 = unlimited. */
    bandwidthBytesPerSec: number;
    /** Background fetch tasks at once, store-wide; 0 = max_concurrency. */
    concurrency: number;
  };
  deadlines: {
    /** Resolving a layer (manifest, config, footer, TOC) on diff/info/blob lookup. */
    lookupSec: number;
    /** One layer read (fetch + verify). */
    readSec: number;
    /**
     * Hard limit of any FUSE operation (the adapter answers EIO when it expires); above lookup_sec
     * and read_sec so the store's own answers come first.
     */
    fuseSec: number;
    /** How long "this layer cannot be served lazily" (ENOENT, normal pull) is remembered. */
    negativeTtlSec: number;
  };
  platform: { platforms: string[] };
  registry: {
    /** containers auth.json; '' = c/image search order ($REGISTRY_AUTH_FILE, /run/containers/0/auth.json, ...). */
    authFile: string;
    /** docker config.json; '' = $DOCKER_CONFIG/config.json or ~/.docker/config.json. */
    dockerConfig: string;
    /** registries.conf for mirrors/insecure; '' = do not read one. A missing file is fine. */
    registriesConf: string;
    /** How long a tag -> manifest digest resolution is trusted. */
    tagTtlSec: number;
  };
}

export interface ConfigFlags {
  /** --config; undefined = default path (whose absence is not an error). */
  config?: string;
  logLevel?: string;
  root?: string;
  addr?: string;
  mountpoint?: string;
  /** --record-accesses FILE (wins over `[debug] record_accesses`; '' = off). */
  recordAccesses?: string;
  /** --metrics-address host:port (wins over `metrics_address`; '' = off). */
  metricsAddress?: string;
  /** --set key=value overrides (dotted keys, TOML values: `blob.chunk_size=100000`). */
  set?: string[];
}

export interface LoadedConfig {
  config: StoreConfig;
  /** Unknown keys and unsupported features: log at warn. */
  warnings: string[];
  /** Keys accepted for compatibility that change nothing here: log at debug. */
  notes: string[];
}

/** Reads the file named by flags (or the default path) and builds the validated config. */
export async function loadConfig(flags: ConfigFlags): Promise<LoadedConfig> {
  const path = resolve(flags.config ?? DEFAULT_CONFIG_PATH);
  let text: string | undefined;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Like Go: only the default location may be absent.
    if (!(code === 'ENOENT' && path === DEFAULT_CONFIG_PATH)) {
      const why = code === 'ENOENT' ? 'not found' : (err as Error).message;
      throw new StoreError('E_CONFIG', `config file ${path}: ${why}`, { path });
    }
  }
  return buildConfig(text, flags, text === undefined ? undefined : path);
}

/** Pure core of loadConfig: `text` is the TOML file content (undefined = no file). */
export function buildConfig(text: string | undefined, flags: ConfigFlags, source?: string): LoadedConfig {
  const table = text === undefined ? {} : parseTomlText(text, source ?? '<config>');
  for (const assignment of flags.set ?? []) applyOverride(table, assignment);
  const ctx: Ctx = { warnings: [], notes: [] };
  const config = readConfig(new Section(table, '', ctx), flags, text === undefined ? undefined : source);
  return { config, warnings: ctx.warnings, notes: ctx.notes };
}

function parseTomlText(text: string, source: string): TomlTable {
  try {
    return parseToml(text, { integersAsBigInt: 'asNeeded', unsafeKeyBehaviour: 'throw', maxDepth: 32 });
  } catch (err) {
    const msg =
      err instanceof TomlError
        ? `${err.message.split('\n')[0] ?? ''} (line ${err.line}, column ${err.column})`
        : (err as Error).message;
    throw new StoreError('E_CONFIG', `config file ${source}: invalid TOML: ${msg}`, { path: source });
  }
}

/** `--set blob.chunk_size=100000`: the value is TOML (unquoted words are taken as strings). */
function applyOverride(table: TomlTable, assignment: string): void {
  const eq = assignment.indexOf('=');
  const key = eq > 0 ? assignment.slice(0, eq).trim() : '';
  if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(key)) {
    throw new StoreError(
      'E_CONFIG',
      `flag --set: expected key=value with a dotted key, got ${JSON.stringify(assignment)}`,
    );
  }
  if (key.split('.').some((p) => p === '__proto__' || p === 'constructor' || p === 'prototype')) {
    throw new StoreError('E_CONFIG', `flag --set: reserved key ${JSON.stringify(key)}`);
  }
  const raw = assignment.slice(eq + 1).trim();
  let value: unknown;
  try {
    value = parseToml(`v = ${raw}`, { integersAsBigInt: 'asNeeded', unsafeKeyBehaviour: 'throw' }).v;
  } catch {
    value = raw;
  }
  const parts = key.split('.');
  let cur: Record<string, unknown> = table;
  for (const p of parts.slice(0, -1)) {
    const next = cur[p];
    if (next === undefined) cur[p] = {};
    else if (typeof next !== 'object' || next === null || Array.isArray(next)) {
      throw new StoreError('E_CONFIG', `flag --set ${key}: ${p} is not a table`, { key });
    }
    cur = cur[p] as Record<string, unknown>;
  }
  cur[parts[parts.length - 1]!] = value;
}

interface Ctx {
  warnings: string[];
  notes: string[];
}

function fail(key: string, what: string, got: unknown): never {
  throw new StoreError('E_CONFIG', `config key ${key}: ${what}, got ${show(got)}`, { key });
}

function show(v: unknown): string {
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return `an array`;
  if (v !== null && typeof v === 'object') return v instanceof Date ? 'a date' : 'a table';
  return String(v);
}

interface IntOpts {
  /** Smallest accepted value (default 0). */
  min?: number;
  /** Go rule: 0 means the default. */
  zeroIsDefault?: boolean;
  /** Message for values below min (default derived from min). */
  what?: string;
  /** Accepted but changes nothing in this store. */
  noEffect?: boolean;
}

/** One TOML table being read; remembers which keys were consumed so leftovers can be warned about. */
class Section {
  private readonly seen = new Set<string>();

  constructor(
    readonly table: TomlTable,
    /** '' for top level, else the display name used inside [brackets]. */
    readonly name: string,
    readonly ctx: Ctx,
  ) {}

  key(k: string): string {
    return this.name === '' ? k : `${this.name.startsWith('[[') ? this.name : `[${this.name}]`} ${k}`;
  }

  private get(k: string, noEffect: boolean | undefined): unknown {
    this.seen.add(k);
    const v = this.table[k];
    if (v !== undefined && noEffect === true)
      this.ctx.notes.push(`config key ${this.key(k)} has no effect in this store`);
    return v;
  }

  bool(k: string, def: boolean, noEffect?: boolean): boolean {
    const v = this.get(k, noEffect);
    if (v === undefined) return def;
    if (typeof v !== 'boolean') fail(this.key(k), 'must be true or false', v);
    return v;
  }

  int(k: string, def: number, opts: IntOpts = {}): number {
    const v = this.get(k, opts.noEffect);
    if (v === undefined) return def;
    const min = opts.min ?? 0;
    const what =
      opts.what ??
      (min === 1
        ? 'must be a positive integer'
        : min === 0
          ? 'must be a non-negative integer'
          : `must be an integer >= ${min}`);
    if (typeof v === 'bigint') fail(this.key(k), `${what} below 2^53`, v);
    if (typeof v !== 'number' || !Number.isInteger(v)) fail(this.key(k), what, v);
    if (v === 0 && opts.zeroIsDefault === true) return def;
    if (v < min) fail(this.key(k), what, v);
    return v;
  }

  /** Seconds as a positive finite number (fractions allowed: tests use sub-second deadlines). */
  seconds(k: string, def: number): number {
    const v = this.get(k, false);
    if (v === undefined) return def;
    if (typeof v === 'bigint' || typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
      fail(this.key(k), 'must be a positive number of seconds', v);
    }
    return v;
  }

  str(k: string, def: string, noEffect?: boolean): string {
    const v = this.get(k, noEffect);
    if (v === undefined) return def;
    if (typeof v !== 'string') fail(this.key(k), 'must be a string', v);
    return v;
  }

  oneOf<T extends string>(
    k: string,
    values: readonly T[],
    def: T,
    opts: { emptyIsDefault?: boolean; noEffect?: boolean } = {},
  ): T {
    const v = this.get(k, opts.noEffect);
    if (v === undefined || (v === '' && opts.emptyIsDefault === true)) return def;
    if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
      fail(this.key(k), `must be one of ${values.map((x) => JSON.stringify(x)).join(', ')}`, v);
    }
    return v as T;
  }

  /** A sub-table (absent = empty). */
  table_(k: string, displayName?: string): Section {
    const v = this.get(k, false);
    if (v === undefined) return new Section({}, displayName ?? k, this.ctx);
    if (typeof v !== 'object' || v === null || Array.isArray(v) || v instanceof Date) {
      fail(this.key(k), 'must be a table', v);
    }
    return new Section(v as TomlTable, displayName ?? k, this.ctx);
  }

  /** Marks a key as known without reading it (read elsewhere). */
  known(k: string): unknown {
    return this.get(k, false);
  }

  /** Warns about every key nobody asked for. */
  finish(): void {
    for (const k of Object.keys(this.table)) {
      if (!this.seen.has(k)) this.ctx.warnings.push(`unknown config key ${this.key(k)} (ignored)`);
    }
  }
}

function readConfig(top: Section, flags: ConfigFlags, configFile: string | undefined): StoreConfig {
  const logLevel = readLogLevel(flags.logLevel);
  const root = resolve(flags.root ?? DEFAULT_ROOT);
  const addr = resolve(flags.addr ?? DEFAULT_ADDR);
  if (Buffer.byteLength(addr) > MAX_SOCKET_PATH_BYTES) {
    throw new StoreError(
      'E_CONFIG',
      `flag --addr: socket path longer than ${MAX_SOCKET_PATH_BYTES} bytes: ${addr}`,
      {
        key: 'addr',
      },
    );
  }
  if (flags.mountpoint === undefined || flags.mountpoint === '') {
    throw new StoreError('E_CONFIG', 'missing mount point argument (e.g. /var/lib/stargz-store/store)');
  }
  const mountpoint = resolve(flags.mountpoint);

  if (top.bool('disable_verification', false)) {
    throw new StoreError(
      'E_CONFIG',
      'config key disable_verification: verification cannot be disabled (true is fatal, as in the Go store), got true',
      { key: 'disable_verification' },
    );
  }

  const cfg: StoreConfig = {
    configFile,
    mountpoint,
    root,
    addr,
    logLevel,
    httpCacheType: top.oneOf('http_cache_type', ['disk', 'memory'] as const, 'disk', {
      emptyIsDefault: true,
      noEffect: true,
    }),
    filesystemCacheType: top.oneOf('filesystem_cache_type', ['disk', 'memory'] as const, 'disk', {
      emptyIsDefault: true,
      noEffect: true,
    }),
    resolveResultEntryTtlSec: top.int('resolve_result_entry_ttl_sec', 120, { zeroIsDefault: true }),
    prefetchSize: top.int('prefetch_size', 0),
    prefetchTimeoutSec: top.int('prefetch_timeout_sec', 10, { zeroIsDefault: true, noEffect: true }),
    prefetchAsyncSize: top.int('prefetch_async_size', 0, { noEffect: true }),
    noprefetch: top.bool('noprefetch', false),
    noBackgroundFetch: top.bool('no_background_fetch', false),
    ...readDebug(top, flags.recordAccesses),
    allowNoVerification: top.bool('allow_no_verification', false, true),
    maxConcurrency: top.int('max_concurrency', 2, { zeroIsDefault: true, min: 1 }),
    maxTocEntries: top.int('max_toc_entries', 1_000_000, { zeroIsDefault: true, min: 1 }),
    noPrometheus: top.bool('no_prometheus', false, true),
    logFileAccess: top.bool('log_file_access', false, true),
    metadataStore: top.oneOf('metadata_store', ['memory', 'db'] as const, 'memory', {
      emptyIsDefault: true,
      noEffect: true,
    }),
    metricsAddress: readMetricsAddress(top.str('metrics_address', ''), flags.metricsAddress),
    blob: readBlob(top.table_('blob')),
    directoryCache: readDirectoryCache(top.table_('directory_cache')),
    fuse: readFuse(top.table_('fuse')),
    kubeconfigKeychain: readKubeconfig(top.table_('kubeconfig_keychain')),
    resolver: readResolver(top.table_('resolver')),
    cache: readCache(top.table_('cache')),
    background: readBackground(top.table_('background')),
    deadlines: readDeadlines(top.table_('deadlines')),
    platform: readPlatform(top.table_('platform')),
    registry: readRegistry(top.table_('registry')),
  };
  // Deprecated Go key: accepted, nothing to do.
  if (top.known('resolve_result_entry') !== undefined)
    top.ctx.notes.push('config key resolve_result_entry is deprecated and has no effect');
  top.finish();
  return cfg;
}

function readLogLevel(v: string | undefined): LogLevel {
  if (v === undefined) return 'info';
  const l = v.toLowerCase() === 'panic' ? 'fatal' : v.toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(l)) {
    throw new StoreError(
      'E_CONFIG',
      `flag --log-level: must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(v)}`,
      {
        key: 'log-level',
      },
    );
  }
  return l as LogLevel;
}

/**
 * Go's `debug` is a boolean; our debugging keys live in a `[debug]` table. TOML cannot have both, so
 * the table carries the Go meaning as `fuse` (`debug = true` == `[debug] fuse = true`).
 */
function readDebug(
  top: Section,
  recordFlag: string | undefined,
): Pick<StoreConfig, 'debug' | 'recordAccesses'> {
  const v = top.known('debug');
  let debug = false;
  let recordAccesses = '';
  if (typeof v === 'boolean') debug = v;
  else if (v !== undefined) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || v instanceof Date) {
      fail('debug', 'must be true or false (Go) or a [debug] table', v);
    }
    const s = new Section(v as TomlTable, 'debug', top.ctx);
    debug = s.bool('fuse', false);
    recordAccesses = s.str('record_accesses', '');
    if (recordAccesses !== '' && !isAbsolute(recordAccesses)) {
      fail(s.key('record_accesses'), 'must be an absolute path (or "" for off)', recordAccesses);
    }
    s.finish();
  }
  if (recordFlag !== undefined) recordAccesses = recordFlag === '' ? '' : resolve(recordFlag);
  return { debug, recordAccesses };
}

function readBlob(s: Section): StoreConfig['blob'] {
  const checkAlways = s.bool('check_always', false, true);
  const b: StoreConfig['blob'] = {
    validIntervalSec: s.int('valid_interval', 60, { zeroIsDefault: true, noEffect: true }),
    checkAlways,
    chunkSize: s.int('chunk_size', 50000, { zeroIsDefault: true, min: 1 }),
    fetchingTimeoutSec: s.int('fetching_timeout_sec', 300, { zeroIsDefault: true, min: 1 }),
    forceSingleRangeMode: s.bool('force_single_range_mode', false),
    prefetchChunkSize: s.int('prefetch_chunk_size', 0, { noEffect: true }),
    maxRetries: s.int('max_retries', 5, { zeroIsDefault: true }),
    minWaitMsec: s.int('min_wait_msec', 30, { zeroIsDefault: true, min: 1 }),
    maxWaitMsec: s.int('max_wait_msec', 300000, { zeroIsDefault: true, min: 1 }),
  };
  if (b.minWaitMsec > b.maxWaitMsec) {
    fail(s.key('min_wait_msec'), `must not exceed max_wait_msec (${b.maxWaitMsec})`, b.minWaitMsec);
  }
  s.finish();
  return b;
}

function readDirectoryCache(s: Section): StoreConfig['directoryCache'] {
  const d = {
    maxLruCacheEntry: s.int('max_lru_cache_entry', 10, { zeroIsDefault: true, noEffect: true }),
    maxCacheFds: s.int('max_cache_fds', 10, { zeroIsDefault: true, noEffect: true }),
    syncAdd: s.bool('sync_add', false, true),
    direct: s.bool('direct', true, true),
    fadvDontneed: s.bool('fadv_dontneed', false, true),
  };
  s.finish();
  return d;
}

function readFuse(s: Section): StoreConfig['fuse'] {
  const f = {
    // The Go store fixes both at 1 s whatever the file says; so do we.
    attrTimeout: s.int('attr_timeout', 1, { zeroIsDefault: true, noEffect: true }),
    entryTimeout: s.int('entry_timeout', 1, { zeroIsDefault: true, noEffect: true }),
    passthrough: s.bool('passthrough', false, true),
    mergeBufferSize: s.int('merge_buffer_size', 419430400, { zeroIsDefault: true, noEffect: true }),
    mergeWorkerCount: s.int('merge_worker_count', 10, { zeroIsDefault: true, noEffect: true }),
  };
  s.finish();
  return f;
}

function readKubeconfig(s: Section): StoreConfig['kubeconfigKeychain'] {
  const k = {
    enableKeychain: s.bool('enable_keychain', false),
    kubeconfigPath: s.str('kubeconfig_path', ''),
  };
  if (k.enableKeychain) {
    s.ctx.warnings.push(
      'config key [kubeconfig_keychain] enable_keychain: the Kubernetes pull-secret keychain is not supported by this store; use the auth helper, auth.json or docker config instead',
    );
  }
  s.finish();
  return k;
}

function readResolver(s: Section): StoreConfig['resolver'] {
  const requestTimeoutSec = s.int('request_timeout_sec', 30, { zeroIsDefault: true, min: 1 });
  const hosts: StoreConfig['resolver']['hosts'] = {};
  const hostTable = s.table_('host', 'resolver.host');
  for (const [host, value] of Object.entries(hostTable.table)) {
    hostTable.known(host);
    const name = `resolver.host.${JSON.stringify(host)}`;
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      fail(`[${name}]`, 'must be a table', value);
    const hs = new Section(value as TomlTable, name, s.ctx);
    const tls = readTls(hs);
    const raw = hs.known('mirrors');
    const mirrors: MirrorConfig[] = [];
    if (raw !== undefined) {
      if (!Array.isArray(raw)) fail(`[${name}] mirrors`, 'must be an array of tables ([[...mirrors]])', raw);
      raw.forEach((m, i) => {
        const display = `[[${name}.mirrors]]#${i + 1}`;
        if (typeof m !== 'object' || m === null || Array.isArray(m)) fail(display, 'must be a table', m);
        mirrors.push(readMirror(new Section(m as TomlTable, display, s.ctx)));
      });
    }
    hs.finish();
    hosts[host] = tls ? { mirrors, tls } : { mirrors };
  }
  s.finish();
  return { requestTimeoutSec, hosts };
}

/**
 * `ca_file` (a path or an array of paths), `cert_file`, `key_file`: absolute PEM paths. The Go
 * store has no TLS keys; ours are accepted on a `[resolver.host."h"]` table and on each mirror.
 */
function readTls(s: Section): TlsFiles | undefined {
  const abs = (k: string, v: unknown): string => {
    if (typeof v !== 'string' || !isAbsolute(v)) fail(s.key(k), 'must be an absolute path', v);
    return v;
  };
  const tls: TlsFiles = {};
  const ca = s.known('ca_file');
  if (ca !== undefined) {
    const list = Array.isArray(ca) ? (ca as unknown[]) : [ca];
    if (list.length === 0) fail(s.key('ca_file'), 'must be a path or a non-empty array of paths', ca);
    tls.caFiles = list.map((v) => abs('ca_file', v));
  }
  const cert = s.known('cert_file');
  const key = s.known('key_file');
  if (cert !== undefined) tls.certFile = abs('cert_file', cert);
  if (key !== undefined) tls.keyFile = abs('key_file', key);
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
    fail(
      s.key(tls.certFile === undefined ? 'cert_file' : 'key_file'),
      'needs both cert_file and key_file',
      cert ?? key,
    );
  }
  return Object.keys(tls).length > 0 ? tls : undefined;
}

function readMirror(s: Section): MirrorConfig {
  const host = s.str('host', '');
  if (host === '' || /\s|\/\//.test(host)) {
    fail(s.key('host'), 'must be a host[:port] without scheme (use insecure = true for plain http)', host);
  }
  const insecure = s.bool('insecure', false);
  const requestTimeoutSec = s.int('request_timeout_sec', 0, {
    min: Number.MIN_SAFE_INTEGER,
    what: 'must be an integer',
  });
  const rawHeader = s.known('header');
  const header: Record<string, string[]> = {};
  if (rawHeader !== undefined) {
    if (typeof rawHeader !== 'object' || rawHeader === null || Array.isArray(rawHeader)) {
      fail(s.key('header'), 'must be a table of header = "value" or ["values"]', rawHeader);
    }
    for (const [name, v] of Object.entries(rawHeader)) {
      if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name))
        fail(s.key(`header.${name}`), 'is not a valid header name', name);
      const values = Array.isArray(v) ? v : [v];
      if (values.length === 0 || values.some((x) => typeof x !== 'string' || /[\r\n\0]/.test(x))) {
        fail(s.key(`header.${name}`), 'must be a string or an array of strings without line breaks', v);
      }
      header[name] = values as string[];
    }
  }
  const rangedReads = s.oneOf('ranged_reads', ['mirror', 'split', 'next-host'] as const, 'mirror');
  const nsQuery = s.bool('ns_query', true);
  const tls = readTls(s);
  s.finish();
  const m: MirrorConfig = tls
    ? { host, insecure, requestTimeoutSec, header, tls }
    : { host, insecure, requestTimeoutSec, header };
  // only when not the default, so configs without the keys read as before
  if (rangedReads !== 'mirror') m.rangedReads = rangedReads;
  if (!nsQuery) m.nsQuery = false;
  return m;
}

function readCache(s: Section): StoreConfig['cache'] {
  const c = {
    maxBytes: s.int('max_bytes', 10 * 1024 ** 3),
    minFreeBytes: s.int('min_free_bytes', 1024 ** 3),
    memoryBytes: s.int('memory_bytes', 32 * 1024 ** 2),
  };
  s.finish();
  return c;
}

function readBackground(s: Section): StoreConfig['background'] {
  const b = {
    quietMs: s.int('quiet_ms', 2000),
    bandwidthBytesPerSec: s.int('bandwidth_bytes_per_sec', 32 * 1024 ** 2),
    concurrency: s.int('concurrency', 0),
  };
  s.finish();
  return b;
}

function readDeadlines(s: Section): StoreConfig['deadlines'] {
  const d = {
    lookupSec: s.seconds('lookup_sec', 20),
    readSec: s.seconds('read_sec', 25),
    fuseSec: s.seconds('fuse_sec', 30),
    negativeTtlSec: s.seconds('negative_ttl_sec', 60),
  };
  // the adapter's hard limit must leave the store time to give its own answer (ENOENT, EIO)
  if (d.fuseSec <= d.lookupSec || d.fuseSec <= d.readSec) {
    fail(
      s.key('fuse_sec'),
      `must be greater than lookup_sec (${d.lookupSec}) and read_sec (${d.readSec})`,
      d.fuseSec,
    );
  }
  s.finish();
  return d;
}

const PLATFORM_RE = /^[a-z0-9_.-]+\/[a-z0-9_.-]+(\/[a-z0-9_.-]+)?$/;

function readPlatform(s: Section): StoreConfig['platform'] {
  const v = s.known('platforms');
  // default: what this node runs (a container runtime pulls for its own platform)
  let platforms = [formatPlatform(hostPlatform())];
  if (v !== undefined) {
    if (!Array.isArray(v) || v.length === 0)
      fail(s.key('platforms'), 'must be a non-empty array like ["linux/amd64"]', v);
    for (const p of v) {
      if (typeof p !== 'string' || !PLATFORM_RE.test(p))
        fail(s.key('platforms'), 'entries must look like "os/arch[/variant]"', p);
    }
    platforms = v as string[];
  }
  s.finish();
  return { platforms };
}

function readRegistry(s: Section): StoreConfig['registry'] {
  const path = (k: string, def: string): string => {
    const v = s.str(k, def);
    if (v !== '' && !isAbsolute(v)) fail(s.key(k), 'must be an absolute path (or "" for the default)', v);
    return v;
  };
  const r = {
    authFile: path('auth_file', ''),
    dockerConfig: path('docker_config', ''),
    registriesConf: path('registries_conf', DEFAULT_REGISTRIES_CONF),
    tagTtlSec: s.int('tag_ttl_sec', 60),
  };
  s.finish();
  return r;
}

/** The flag wins over the file; '' is off; anything else must be host:port. */
function readMetricsAddress(fromFile: string, flag: string | undefined): string {
  const v = flag ?? fromFile;
  if (v !== '') parseMetricsAddress(v);
  return v;
}
