import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { parse as parseToml, TomlError, type TomlTable } from 'smol-toml';
import type { z } from 'zod';
import { StoreError } from '../../util/errors.js';
import { parseMetricsAddress } from '../metrics-server.js';
import { fieldDocs, type Camelized } from './fields.js';
import { DEFAULT_ADDR, DEFAULT_CONFIG_PATH, DEFAULT_ROOT } from './locations.js';
import { fileSchema, type FileConfig } from './schema.js';

/**
 * Reading the config: defaults <- config.toml <- command-line flags, validated once at start-up against
 * the declared schema (schema.ts). Unknown keys become `warnings`, Go keys that change nothing here
 * become `notes` (logged at debug), and the first bad value throws StoreError E_CONFIG whose one-line
 * message names the key.
 */

export { DEFAULT_ADDR, DEFAULT_CONFIG_PATH, DEFAULT_ROOT };

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** sun_path is 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

/** The file's tables and keys (camelCase), plus what comes from flags or is folded together. */
export type StoreConfig = Camelized<
  Omit<FileConfig, 'debug' | 'disable_verification' | 'resolve_result_entry'>
> & {
  /** Where the file came from (undefined when the default path was absent). */
  configFile: string | undefined;
  mountpoint: string;
  root: string;
  addr: string;
  logLevel: LogLevel;
  /** FUSE request debug log: Go's top-level `debug = true`, or `[debug] fuse = true`. */
  debug: boolean;
  /** `[debug] record_accesses` / `--record-accesses`: absolute path of the JSON-lines file; '' = off. */
  recordAccesses: string;
};

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
  const raw = text === undefined ? {} : parseTomlText(text, source ?? '<config>');
  for (const assignment of flags.set ?? []) applyOverride(raw, assignment);
  const fromFlags = readFlags(flags);
  const warnings: string[] = [];
  const notes: string[] = [];
  walkKeys(fileSchema, raw, [], raw, warnings, notes);
  const parsed = fileSchema.safeParse(raw);
  if (!parsed.success) throw toConfigError(parsed.error.issues, raw);
  const { debug, disable_verification: _dv, resolve_result_entry: _rre, ...rest } = parsed.data;
  void _dv;
  void _rre;
  const tables = camelizeTop(rest);

  if (tables.kubeconfigKeychain.enableKeychain) {
    warnings.push(
      'config key [kubeconfig_keychain] enable_keychain: the Kubernetes pull-secret keychain is not supported by this store; use the auth helper, auth.json or docker config instead',
    );
  }

  let recordAccesses = typeof debug === 'object' ? debug.record_accesses : '';
  if (flags.recordAccesses !== undefined)
    recordAccesses = flags.recordAccesses === '' ? '' : resolve(flags.recordAccesses);
  // The flag wins over the file; '' is off; anything else must be host:port.
  const metricsAddress = flags.metricsAddress ?? tables.metricsAddress;
  if (metricsAddress !== '') parseMetricsAddress(metricsAddress);

  const config: StoreConfig = {
    configFile: text === undefined ? undefined : source,
    ...fromFlags,
    ...tables,
    metricsAddress,
    debug: typeof debug === 'object' ? debug.fuse : (debug ?? false),
    recordAccesses,
  };
  return { config, warnings, notes };
}

function camelizeTop<T extends object>(o: T): Camelized<T> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o))
    out[k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())] = v;
  return out as Camelized<T>;
}

function readFlags(flags: ConfigFlags): Pick<StoreConfig, 'mountpoint' | 'root' | 'addr' | 'logLevel'> {
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
  return { mountpoint: resolve(flags.mountpoint), root, addr, logLevel };
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

// ---- walking the schema alongside the raw TOML ----

type Schema = z.core.$ZodType;
type Def = { type: string; [k: string]: unknown };

const isTable = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);

/** The structural schema under wrappers (default, optional, transforms); a union picks by value. */
function base(s: Schema, value: unknown): Def {
  let def = s._zod.def as unknown as Def;
  for (;;) {
    if (def.type === 'pipe') def = (def.in as Schema)._zod.def as unknown as Def;
    else if (['default', 'prefault', 'optional', 'nullable', 'readonly'].includes(def.type))
      def = (def.innerType as Schema)._zod.def as unknown as Def;
    else if (def.type === 'union') {
      const options = def.options as Schema[];
      const pick = options.find((o) => (base(o, value).type === 'object') === isTable(value)) ?? options[0]!;
      def = pick._zod.def as unknown as Def;
    } else return def;
  }
}

/** The schema of one child (key of a table, value of a record, element of an array). */
function child(
  def: Def,
  seg: PropertyKey,
): { schema: Schema | undefined; kind: 'key' | 'rec' | 'idx' } | undefined {
  if (def.type === 'object')
    return { schema: (def.shape as Record<string, Schema>)[String(seg)], kind: 'key' };
  if (def.type === 'record') return { schema: def.valueType as Schema, kind: 'rec' };
  if (def.type === 'array') return { schema: def.element as Schema, kind: 'idx' };
  return undefined;
}

/**
 * How a key is named in messages: `chunk_size`, `[blob] chunk_size`, `[resolver.host."a"] ca_file`,
 * `[[resolver.host."docker.io".mirrors]]#1 header.x-a` (the deepest TOML table, then the key in it).
 */
export function displayKey(path: readonly PropertyKey[], raw: unknown): string {
  let schema: Schema | undefined = fileSchema;
  let value = raw;
  const segs: { name: string; kind: 'key' | 'rec' | 'idx' }[] = [];
  let section = 0;
  for (let i = 0; i < path.length; i++) {
    const seg = path[i]!;
    const c: ReturnType<typeof child> = schema ? child(base(schema, value), seg) : undefined;
    segs.push({ name: String(seg), kind: c?.kind ?? 'key' });
    value =
      isTable(value) || Array.isArray(value) ? (value as Record<string, unknown>)[String(seg)] : undefined;
    schema = c?.schema;
    if (schema && i < path.length - 1 && base(schema, value).type === 'object') section = i + 1;
  }
  const render = (s: typeof segs): string =>
    s.map((x) => (x.kind === 'rec' ? JSON.stringify(x.name) : x.name)).join('.');
  const head = segs.slice(0, section);
  const last = head[head.length - 1];
  const table =
    last === undefined
      ? ''
      : last.kind === 'idx'
        ? `[[${render(head.slice(0, -1))}]]#${Number(last.name) + 1}`
        : `[${render(head)}]`;
  const key = segs
    .slice(section)
    .filter((s) => s.kind !== 'idx')
    .map((s) => s.name)
    .join('.');
  return table === '' ? key : key === '' ? table : `${table} ${key}`;
}

/**
 * Unknown keys -> warnings; keys that are set but change nothing here -> notes. Runs before the schema
 * parse: a TOML date where a table belongs is refused here (zod would take a Date for an empty table).
 */
function walkKeys(
  schema: Schema,
  value: unknown,
  path: PropertyKey[],
  raw: unknown,
  warnings: string[],
  notes: string[],
): void {
  const def = base(schema, value);
  if (value instanceof Date && (def.type === 'object' || def.type === 'record')) {
    const key = displayKey(path, raw);
    throw new StoreError('E_CONFIG', `config key ${key}: must be a table, got a date`, { key });
  }
  if (def.type === 'object' && isTable(value)) {
    for (const [k, v] of Object.entries(value)) {
      const at = [...path, k];
      const c = (def.shape as Record<string, Schema>)[k];
      if (c === undefined) {
        warnings.push(`unknown config key ${displayKey(at, raw)} (ignored)`);
        continue;
      }
      const doc = fieldDocs.get(c);
      if (doc?.noEffect === true) notes.push(`config key ${displayKey(at, raw)} has no effect in this store`);
      if (doc?.deprecated === true)
        notes.push(`config key ${displayKey(at, raw)} is deprecated and has no effect`);
      walkKeys(c, v, at, raw, warnings, notes);
    }
  } else if (def.type === 'record' && isTable(value)) {
    for (const [k, v] of Object.entries(value))
      walkKeys(def.valueType as Schema, v, [...path, k], raw, warnings, notes);
  } else if (def.type === 'array' && Array.isArray(value)) {
    value.forEach((v, i) => walkKeys(def.element as Schema, v, [...path, i], raw, warnings, notes));
  }
}

// ---- errors ----

function show(v: unknown): string {
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return `an array`;
  if (v !== null && typeof v === 'object') return v instanceof Date ? 'a date' : 'a table';
  return String(v);
}

/** A union that failed inside one of its options reports that option's issue, not "no option matched". */
function innermost(i: z.core.$ZodIssue): z.core.$ZodIssue {
  if (i.code !== 'invalid_union') return i;
  for (const branch of i.errors) {
    const deep = branch.find((b) => b.path.length > 0 || b.code !== 'invalid_type');
    if (deep) {
      const inner = innermost(deep);
      return { ...inner, path: [...i.path, ...inner.path] } as z.core.$ZodIssue;
    }
  }
  return i;
}

function toConfigError(issues: readonly z.core.$ZodIssue[], raw: unknown): StoreError {
  const i = innermost(issues[0]!);
  let got: unknown = raw;
  for (const p of i.path)
    got = isTable(got) || Array.isArray(got) ? (got as Record<string, unknown>)[String(p)] : undefined;
  const params = (i as { params?: { got?: unknown } }).params;
  if (params !== undefined && 'got' in params) got = params.got;
  const key = displayKey(i.path, raw);
  return new StoreError('E_CONFIG', `config key ${key}: ${i.message}, got ${show(got)}`, { key });
}
