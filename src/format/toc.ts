/**
 * TOC JSON parsing (eStargz `stargz.index.json` and both zstd:chunked manifest styles) into
 * typed, validated raw entries. Keys are matched case-insensitively like Go's encoding/json;
 * unknown keys are ignored; `null` means "absent". The document is read in pieces by toc-scan.ts;
 * normalisation into the tree is toc-tree.ts; toc-reader.ts runs the whole pipeline.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { StoreError } from '../util/errors.js';
import { isSha256 } from './index-chunk.js';

/**
 * Cooperative slicing for long loops on the main thread: `tick()` gives the event loop a turn
 * once the current slice has run for `budgetMs`. Call it every few hundred iterations.
 */
export class Slicer {
  private start = performance.now();
  constructor(
    private readonly budgetMs = 8,
    /** Between slices: a promise to wait on before the next one (ParseTurns.pause). */
    private readonly pause?: () => Promise<void> | undefined,
  ) {}
  async tick(): Promise<void> {
    // a parse to hold back stops at once, not at the end of its slice: a slice of an eager
    // parse is a slice the client's own resolution waits for
    let held = this.pause?.();
    if (held === undefined) {
      if (performance.now() - this.start < this.budgetMs) return;
      await yieldToLoop();
      held = this.pause?.();
    }
    if (held !== undefined) await held;
    this.start = performance.now();
  }
}

/**
 * Orders concurrent TOC parses on the one main thread: the store slows parses nobody waits for
 * (layers resolved ahead of the client) while a client waits on another resolution.
 */
export interface ParseTurns {
  /** At every tick of the parse: a promise to wait on before it goes on, or undefined. */
  pause(): Promise<void> | undefined;
}

export const ENTRY_TYPES = ['dir', 'reg', 'symlink', 'hardlink', 'char', 'block', 'fifo', 'chunk'] as const;
export type EntryType = (typeof ENTRY_TYPES)[number];

export interface TocEntry {
  /** Position in the TOC (for error messages). */
  index: number;
  name: string;
  type: EntryType;
  size: number;
  modtime?: string;
  linkName: string;
  mode: number;
  uid: number;
  gid: number;
  userName?: string;
  groupName?: string;
  /** Absent in JSON = 0 (Go omitempty). */
  offset: number;
  innerOffset: number;
  /** containers/storage: end of the file's (or chunk's) compressed data. */
  endOffset?: number;
  devMajor: number;
  devMinor: number;
  /** xattr name -> standard base64 value, as stored. */
  xattrs?: Record<string, string>;
  digest?: string;
  chunkOffset: number;
  chunkSize: number;
  chunkDigest?: string;
  /** containers/storage: '' (data) or 'zeros'. */
  chunkType?: string;
}

export interface ParsedToc {
  version?: number;
  tarSplitDigest?: string;
}

type Kind = 'string' | 'int' | 'object';
type Field = readonly [canonical: keyof TocEntry, kind: Kind] | undefined;
// Maps, not object literals: keys such as `__proto__` must not hit the prototype.
/** Lower-cased key -> field (Go matches keys case-insensitively). */
const FIELDS = new Map<string, Field>();
/**
 * Exact spellings seen in TOCs -> field, or undefined for keys known to be ignored. Looked up
 * first: JSON.parse interns keys, so this hit costs no toLowerCase() string per key per entry.
 */
const EXACT = new Map<string, Field>([
  ['accesstime', undefined],
  ['changetime', undefined],
]);
for (const [key, kind] of [
  ['name', 'string'],
  ['type', 'string'],
  ['size', 'int'],
  ['modtime', 'string'],
  ['linkName', 'string'],
  ['mode', 'int'],
  ['uid', 'int'],
  ['gid', 'int'],
  ['userName', 'string'],
  ['groupName', 'string'],
  ['offset', 'int'],
  ['innerOffset', 'int'],
  ['endOffset', 'int'],
  ['devMajor', 'int'],
  ['devMinor', 'int'],
  ['xattrs', 'object'],
  ['digest', 'string'],
  ['chunkOffset', 'int'],
  ['chunkSize', 'int'],
  ['chunkDigest', 'string'],
  ['chunkType', 'string'],
] as const) {
  FIELDS.set(key.toLowerCase(), [key, kind]);
  EXACT.set(key, [key, kind]);
}

function fieldOf(key: string): Field {
  const exact = EXACT.get(key);
  if (exact !== undefined || EXACT.has(key)) return exact;
  return FIELDS.get(key.toLowerCase());
}
const TYPE_SET: ReadonlySet<string> = new Set(ENTRY_TYPES);
const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function bad(index: number, message: string): StoreError {
  return new StoreError('E_BAD_TOC', `TOC entry ${index}: ${message}`, { entry: index });
}

/** Largest value accepted for ids/device numbers (32-bit unsigned). */
const U32_MAX = 0xffffffff;

export function parseEntry(raw: unknown, index: number): TocEntry {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw bad(index, 'not an object');
  // One object shape for every entry (absent optionals stay undefined) and no temporaries:
  // TOCs reach millions of entries, so allocation and hidden-class churn matter here.
  const e: TocEntry = {
    index,
    name: '',
    type: '' as EntryType,
    size: 0,
    modtime: undefined,
    linkName: '',
    mode: 0,
    uid: 0,
    gid: 0,
    userName: undefined,
    groupName: undefined,
    offset: 0,
    innerOffset: 0,
    endOffset: undefined,
    devMajor: 0,
    devMinor: 0,
    xattrs: undefined,
    digest: undefined,
    chunkOffset: 0,
    chunkSize: 0,
    chunkDigest: undefined,
    chunkType: undefined,
  };
  let hasName = false;
  // for-in keeps JSON order (no integer-like keys here), so with case variants the last one
  // wins, as in Go.
  for (const key in raw) {
    const field = fieldOf(key);
    const value = (raw as Record<string, unknown>)[key];
    if (field === undefined || value === null) continue;
    const [canonical, kind] = field;
    if (kind === 'string') {
      if (typeof value !== 'string') throw bad(index, `${canonical} must be a string`);
    } else if (kind === 'int') {
      if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
        throw bad(index, `${canonical} must be a safe integer`);
      }
      if (value < 0) throw bad(index, `${canonical} must not be negative`);
    } else if (typeof value !== 'object' || Array.isArray(value)) {
      throw bad(index, `${canonical} must be an object`);
    }
    if (canonical === 'name') hasName = true;
    (e as unknown as Record<string, unknown>)[canonical] = value;
  }
  if (!TYPE_SET.has(e.type)) throw bad(index, `unknown entry type ${JSON.stringify(e.type || null)}`);
  if (!hasName && e.type !== 'chunk') throw bad(index, 'missing name');
  if (e.uid > U32_MAX || e.gid > U32_MAX || e.devMajor > U32_MAX || e.devMinor > U32_MAX) {
    throw bad(index, 'uid/gid/device number out of range');
  }
  // Go omitempty: empty strings and zero offsets mean "absent"
  if (e.digest === '') e.digest = undefined;
  if (e.chunkDigest === '') e.chunkDigest = undefined;
  if (e.userName === '') e.userName = undefined;
  if (e.groupName === '') e.groupName = undefined;
  if (e.chunkType === '') e.chunkType = undefined;
  if (e.endOffset === 0) e.endOffset = undefined;
  if (e.digest !== undefined && !isSha256(e.digest)) throw bad(index, 'digest is not a sha256 digest');
  // writers repeat the file digest as chunkDigest of a one-chunk file: check and keep it once
  if (e.chunkDigest !== undefined && e.chunkDigest === e.digest) e.chunkDigest = e.digest;
  else if (e.chunkDigest !== undefined && !isSha256(e.chunkDigest)) {
    throw bad(index, 'chunkDigest is not a sha256 digest');
  }
  if (e.chunkType !== undefined && e.chunkType !== 'zeros') {
    throw bad(index, `unknown chunkType ${JSON.stringify(e.chunkType)}`);
  }
  if (e.xattrs !== undefined) {
    for (const [k, v] of Object.entries(e.xattrs)) {
      if (k === '' || k.includes('\0')) throw bad(index, 'invalid xattr name');
      if (typeof v !== 'string' || !BASE64_RE.test(v)) throw bad(index, `xattr ${k} is not standard base64`);
    }
  }
  return e;
}

/** Check the top-level `version` and `tarSplitDigest` values (absent/null allowed). */
export function checkTopLevel(
  version: unknown,
  tarSplitDigest: unknown,
): Pick<ParsedToc, 'version' | 'tarSplitDigest'> {
  if (
    version !== undefined &&
    version !== null &&
    (typeof version !== 'number' || !Number.isSafeInteger(version))
  ) {
    throw new StoreError('E_BAD_TOC', 'TOC version is not an integer');
  }
  if (tarSplitDigest !== undefined && tarSplitDigest !== null && typeof tarSplitDigest !== 'string') {
    throw new StoreError('E_BAD_TOC', 'TOC tarSplitDigest is not a string');
  }
  const out: Pick<ParsedToc, 'version' | 'tarSplitDigest'> = {};
  if (typeof version === 'number') out.version = version;
  if (typeof tarSplitDigest === 'string' && tarSplitDigest !== '') out.tarSplitDigest = tarSplitDigest;
  return out;
}
