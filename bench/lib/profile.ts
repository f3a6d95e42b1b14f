import { lstat, open, readFile, readlink, rm } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { withRootBinds } from './rootfs.js';
import { run, which } from './proc.js';

/**
 * Access profiles: which files a workload's entrypoint opens, in first-open order. They feed the
 * optimised eStargz build (`prioritize`). The source is pluggable:
 *  - `store` (default): run the unoptimised eStargz image once through our store started with
 *    `--record-accesses`; the store's record of opened layer files (and distinct bytes read from each)
 *    is the profile. It sees what Podman and the container really opened, interpreters and loaders
 *    included, exactly as served lazily;
 *  - `strace`: run the entrypoint under `strace -f` chrooted into the assembled image rootfs;
 *  - `file:<path>`: a recorded list (JSON array of paths, or one path per line; a store record file,
 *    JSON lines with a `path` each, works too).
 */

export interface FileAccess {
  /** Size of the regular file in the image. */
  size: number;
  /** Bytes read (read/pread) plus bytes mapped (mmap), when the source knows them. */
  bytesRead?: number;
  /** The file was executed (or loaded by the kernel as an interpreter). */
  exec?: boolean;
}

export interface AccessProfile {
  source: string;
  /** Absolute image paths (symlinks resolved to the files they name), first-open order. */
  files: string[];
  /** Per regular file (canonical path): size and what the source saw of its use. */
  details: Record<string, FileAccess>;
}

/** Bump when recording or canonicalisation changes, so cached profiles are recorded again. */
export const PROFILE_VERSION = 2;

export interface ProfileContext {
  /** The image's root file system, assembled (all layers merged). */
  rootfs: string;
  argv: string[];
  env: string[];
  workingDir: string;
  /** Where a source may put scratch files. */
  scratch: string;
  /** Names the workload in scratch file names. */
  label?: string;
  /**
   * For the `store` source: run the workload's unoptimised eStargz image once through our store with
   * `--record-accesses recordFile` (the harness provides this).
   */
  lazyRun?: (recordFile: string) => Promise<LazyRunInfo>;
}

/** What a recorded lazy run tells the `store` source. */
export interface LazyRunInfo {
  /** Per image layer (bottom first): the ALS digests it can appear under (blob digest, TOC digest). */
  layerDigests: string[][];
}

export interface ProfileSource {
  readonly name: string;
  record(ctx: ProfileContext): Promise<AccessProfile>;
}

const TRACE_RE =
  /^(?:(\d+)\s+)?(openat|open|execve|chroot|read|pread64|mmap)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)/;

/** Extract the first argument string of a syscall argument list as strace prints it. Pure. */
function firstPathArg(name: string, args: string): string | undefined {
  // openat(AT_FDCWD, "/x", ...) | open("/x", ...) | execve("/x", [...]) | chroot("/x")
  let rest = args;
  if (name === 'openat') {
    const comma = rest.indexOf(', ');
    if (comma < 0) return undefined;
    const dirfd = rest.slice(0, comma);
    rest = rest.slice(comma + 2);
    if (dirfd !== 'AT_FDCWD' && !rest.startsWith('"/')) return undefined;
  }
  const m = /^"((?:[^"\\]|\\.)*)"/.exec(rest);
  if (!m) return undefined;
  return unescapeStrace(m[1]!);
}

/** strace prints non-printable and non-ASCII bytes as C escapes: rebuild the bytes, then decode UTF-8. */
function unescapeStrace(s: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (c !== '\\' || i + 1 >= s.length) {
      bytes.push(...Buffer.from(c, 'utf8'));
      continue;
    }
    const rest = s.slice(i + 1);
    const hex = /^x([0-9a-fA-F]{2})/.exec(rest);
    const oct = /^([0-7]{1,3})/.exec(rest);
    if (hex) {
      bytes.push(parseInt(hex[1]!, 16));
      i += 3;
    } else if (oct) {
      bytes.push(parseInt(oct[1]!, 8) & 0xff);
      i += oct[1]!.length;
    } else {
      const e = rest[0]!;
      const map: Record<string, number> = { n: 10, t: 9, r: 13, v: 11, f: 12 };
      bytes.push(map[e] ?? e.charCodeAt(0));
      i += 1;
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

export interface TraceEvent {
  path: string;
  /** execve'd (its interpreter is loaded by the kernel, invisible to strace). */
  exec: boolean;
  /** Bytes read or mapped through descriptors opened on this path. */
  bytes: number;
}

/**
 * Paths successfully opened or executed AFTER the first successful chroot (earlier events are the
 * host side of the chroot), first occurrence only, with the bytes read (read, pread64) or mapped
 * (mmap) through descriptors opened on them. Relative paths are resolved against `cwd`. Pure.
 */
export function parseStraceEvents(text: string, cwd = '/'): TraceEvent[] {
  const byPath = new Map<string, TraceEvent>();
  const fds = new Map<string, TraceEvent>();
  let inRoot = false;
  for (const line of text.split('\n')) {
    const m = TRACE_RE.exec(line.trim());
    if (!m) continue;
    const [, pid = '0', name, args, ret] = m;
    if (ret === '?' || ret!.startsWith('-')) continue;
    if (name === 'chroot') {
      inRoot = true;
      continue;
    }
    if (!inRoot) continue;
    if (name === 'read' || name === 'pread64' || name === 'mmap') {
      const a = args!.split(', ');
      const fd = name === 'mmap' ? a[4] : a[0];
      const n = name === 'mmap' ? Number(a[1]) : Number(ret);
      const ev = fds.get(`${pid}:${fd}`);
      if (ev && Number.isFinite(n)) ev.bytes += n;
      continue;
    }
    const p = firstPathArg(name!, args!);
    if (p === undefined || p === '') continue;
    const abs = posix.normalize(p.startsWith('/') ? p : posix.join(cwd, p));
    let ev = byPath.get(abs);
    if (!ev) {
      ev = { path: abs, exec: false, bytes: 0 };
      byPath.set(abs, ev);
    }
    if (name === 'execve') ev.exec = true;
    else fds.set(`${pid}:${ret}`, ev);
  }
  return [...byPath.values()];
}

export function parseStraceOpens(text: string, cwd = '/'): string[] {
  return parseStraceEvents(text, cwd).map((e) => e.path);
}

/**
 * The program the kernel loads to run a file (never seen by strace): the `#!` interpreter of a script
 * or PT_INTERP (the dynamic loader) of an ELF64 little-endian binary. `readAt` returns the bytes at
 * [offset, offset+length) of the file, or fewer at its end.
 */
export async function interpreterOf(
  readAt: (offset: number, length: number) => Promise<Buffer>,
): Promise<string | undefined> {
  const head = await readAt(0, 256);
  if (head.length >= 2 && head[0] === 0x23 && head[1] === 0x21) {
    const nl = head.indexOf(0x0a);
    const line = head
      .subarray(2, nl > 0 ? nl : head.length)
      .toString()
      .trim();
    return line.split(/\s+/)[0] || undefined;
  }
  // \x7fELF, ELFCLASS64, little endian
  if (head.length < 64 || head.readUInt32BE(0) !== 0x7f454c46 || head[4] !== 2 || head[5] !== 1)
    return undefined;
  const phoff = Number(head.readBigUInt64LE(0x20));
  const phentsize = head.readUInt16LE(0x36);
  const phnum = head.readUInt16LE(0x38);
  if (phentsize < 56 || phnum > 512) return undefined;
  const phdrs = await readAt(phoff, phentsize * phnum);
  for (let i = 0; (i + 1) * phentsize <= phdrs.length; i++) {
    const ph = phdrs.subarray(i * phentsize, (i + 1) * phentsize);
    if (ph.readUInt32LE(0) !== 3) continue; // PT_INTERP
    const len = Number(ph.readBigUInt64LE(32));
    if (len > 4096) return undefined;
    const s = (await readAt(Number(ph.readBigUInt64LE(8)), len)).toString('latin1');
    return s.replace(/\0[^]*$/, '') || undefined;
  }
  return undefined;
}

async function interpreterInRoot(root: string, abs: string): Promise<string | undefined> {
  let fh;
  try {
    fh = await open(join(root, abs), 'r');
    const f = fh;
    return await interpreterOf(async (offset, length) => {
      const b = Buffer.alloc(length);
      const { bytesRead } = await f.read(b, 0, length, offset);
      return b.subarray(0, bytesRead);
    });
  } catch {
    return undefined;
  } finally {
    await fh?.close();
  }
}

/** Events with the interpreters of executed files inserted right after them (recursively). */
export async function withInterpreters(root: string, events: readonly TraceEvent[]): Promise<TraceEvent[]> {
  const out: TraceEvent[] = [];
  const seen = new Set<string>();
  const add = async (e: TraceEvent, depth: number) => {
    if (seen.has(e.path)) return;
    seen.add(e.path);
    out.push(e);
    if (!e.exec || depth > 4) return;
    const r = await resolveInRoot(root, e.path);
    const interp = r ? await interpreterInRoot(root, r.target) : undefined;
    if (interp) await add({ path: posix.normalize(interp), exec: true, bytes: 0 }, depth + 1);
  };
  for (const e of events) await add(e, 0);
  return out;
}

/**
 * Resolve an absolute image path inside `root` as the container would (symlinks relative to the image
 * root, at most 40 hops). Returns every path on the way that is itself a symlink, then the final path,
 * or undefined if it does not exist.
 */
export async function resolveInRoot(
  root: string,
  abs: string,
): Promise<{ links: string[]; target: string } | undefined> {
  const links: string[] = [];
  let parts = abs.split('/').filter((s) => s.length > 0);
  let done: string[] = [];
  let hops = 0;
  while (parts.length > 0) {
    const name = parts.shift()!;
    if (name === '.') continue;
    if (name === '..') {
      done.pop();
      continue;
    }
    const cur = '/' + [...done, name].join('/');
    let st;
    try {
      st = await lstat(join(root, cur));
    } catch {
      return undefined;
    }
    if (st.isSymbolicLink()) {
      if (++hops > 40) return undefined;
      links.push(cur);
      const to = await readlink(join(root, cur));
      if (to.startsWith('/')) done = [];
      parts = [...to.split('/').filter((s) => s.length > 0), ...parts];
      continue;
    }
    done.push(name);
  }
  return { links, target: '/' + done.join('/') };
}

export interface Access {
  path: string;
  exec?: boolean;
  bytes?: number;
}

/**
 * Keep regular files of the rootfs (plus the symlinks leading to them), in order, without duplicates;
 * per canonical file its size and the accesses folded onto it.
 */
export async function canonicalizeProfile(
  root: string,
  accesses: readonly (Access | string)[],
): Promise<{ files: string[]; details: Record<string, FileAccess> }> {
  const files: string[] = [];
  const details: Record<string, FileAccess> = {};
  const seen = new Set<string>();
  const add = (p: string) => {
    if (!seen.has(p)) {
      seen.add(p);
      files.push(p);
    }
  };
  for (const a of accesses) {
    const acc: Access = typeof a === 'string' ? { path: a } : a;
    if (/^\/(proc|sys|dev)(\/|$)/.test(acc.path)) continue;
    const r = await resolveInRoot(root, acc.path);
    if (!r) continue;
    const st = await lstat(join(root, r.target)).catch(() => undefined);
    if (!st?.isFile()) continue;
    for (const l of r.links) add(l);
    add(r.target);
    const d = (details[r.target] ??= { size: st.size });
    if (acc.bytes !== undefined) d.bytesRead = (d.bytesRead ?? 0) + acc.bytes;
    if (acc.exec) d.exec = true;
  }
  return { files, details };
}

export interface PrioritizePolicy {
  /** Files up to this size are always prioritised (default 16 MiB). */
  wholeFileMax: number;
  /** Bigger files only when at least this fraction was read or mapped (default 0.25). */
  minCoverage: number;
}

export const DEFAULT_POLICY: PrioritizePolicy = { wholeFileMax: 16 << 20, minCoverage: 0.25 };

/**
 * Which profile entries to move to the front of the optimised layers. Prioritised files are fetched
 * whole before the container needs them, so a big file of which the entrypoint reads a few MiB (a
 * model shard) is left to on-demand reads instead. Executables and files of unknown coverage stay. Pure.
 */
export function selectPrioritized(
  p: AccessProfile,
  policy: PrioritizePolicy = DEFAULT_POLICY,
): { files: string[]; skipped: Array<{ path: string; size: number; bytesRead: number }> } {
  const skipped: Array<{ path: string; size: number; bytesRead: number }> = [];
  const files = p.files.filter((f) => {
    const d = p.details[f];
    if (!d || d.exec || d.size <= policy.wholeFileMax || d.bytesRead === undefined) return true;
    if (d.bytesRead >= d.size * policy.minCoverage) return true;
    skipped.push({ path: f, size: d.size, bytesRead: d.bytesRead });
    return false;
  });
  return { files, skipped };
}

export class StraceProfileSource implements ProfileSource {
  readonly name = 'strace';

  async record(ctx: ProfileContext): Promise<AccessProfile> {
    if (!(await which('strace'))) {
      throw new StoreError(
        'E_NOT_FOUND',
        'strace is required to record an access profile (apt package strace)',
      );
    }
    const out = join(ctx.scratch, `strace-${process.pid}.out`);
    // env and unshare are host binaries; unshare --root is the chroot() that starts the recording
    const traced = withRootBinds(ctx.rootfs, [
      'strace',
      '-f',
      '-qq',
      // -s 0: read() buffers are not printed (paths always are, whole)
      '-s',
      '0',
      '-e',
      'trace=open,openat,execve,chroot,read,pread64,mmap',
      '-e',
      'status=successful',
      '-o',
      out,
      'env',
      '-i',
      ...ctx.env,
      'unshare',
      `--root=${ctx.rootfs}`,
      `--wd=${ctx.workingDir}`,
      ...ctx.argv,
    ]);
    const r = await run(traced[0]!, traced.slice(1), { allowFail: true, timeoutMs: 10 * 60_000 });
    if (r.code !== 0) {
      throw new StoreError(
        'E_IO',
        `profile run of ${ctx.argv.join(' ')} failed (exit ${String(r.code)}): ${r.stderr.slice(-800)}`,
      );
    }
    const text = await readFile(out, 'utf8');
    await rm(out, { force: true });
    const events = parseStraceEvents(text, ctx.workingDir);
    const c = await canonicalizeProfile(ctx.rootfs, await withInterpreters(ctx.rootfs, events));
    return { source: 'strace', ...c };
  }
}

export class FileProfileSource implements ProfileSource {
  readonly name: string;
  constructor(private readonly path: string) {
    this.name = `file:${path}`;
  }

  async record(ctx: ProfileContext): Promise<AccessProfile> {
    const text = await readFile(this.path, 'utf8');
    let list: string[];
    try {
      const j = JSON.parse(text) as unknown;
      if (Array.isArray(j)) {
        list = j.map((e) => (typeof e === 'string' ? e : String((e as { path?: unknown }).path)));
      } else {
        const files = (j as { files?: unknown }).files;
        if (!Array.isArray(files)) throw new Error('not a profile object');
        list = files.map(String);
      }
    } catch {
      list = text.split('\n').map((s) => s.trim());
      // a store record (JSON lines): its opened and readlinked paths, in order
      if (list[0]?.startsWith('{')) {
        list = list.flatMap((line) => {
          try {
            const l = JSON.parse(line) as StoreAccessLine;
            return (l.event === 'open' || l.event === 'readlink') && typeof l.path === 'string'
              ? [l.path]
              : [];
          } catch {
            return [];
          }
        });
      }
    }
    const abs = list.filter((s) => s.length > 0).map((s) => (s.startsWith('/') ? s : '/' + s));
    return { source: this.name, ...(await canonicalizeProfile(ctx.rootfs, abs)) };
  }
}

/** One line of the store's access record file (src/store/access-log.ts), as far as profiles care. */
interface StoreAccessLine {
  event?: string;
  digest?: string;
  path?: string;
  size?: number;
  bytesRead?: number;
  count?: number;
}

/**
 * A store access record (JSON lines) as a profile: the files of the given layers in first-open order
 * (layer paths become image paths: '/' + path), symlinks read on the way included (they have no
 * details), with each regular file's size and distinct bytes read (its last `read` line). Lines of
 * other layers are ignored. A record that lost lines is an error (the profile would be incomplete).
 * Pure.
 */
export function profileFromStoreRecord(text: string, layerDigests: readonly string[][]): AccessProfile {
  const layerOf = new Map<string, number>();
  layerDigests.forEach((ds, i) => ds.forEach((d) => layerOf.set(d, i)));
  const files: string[] = [];
  const details: Record<string, FileAccess> = {};
  const seen = new Set<string>();
  let bad = 0;
  for (const raw of text.split('\n')) {
    if (raw.trim() === '') continue;
    let l: StoreAccessLine;
    try {
      l = JSON.parse(raw) as StoreAccessLine;
    } catch {
      bad++;
      continue;
    }
    if (l.event === 'dropped') {
      throw new StoreError(
        'E_IO',
        `the store dropped ${String(l.count)} access record lines: the profile would be incomplete`,
      );
    }
    if (typeof l.digest !== 'string' || typeof l.path !== 'string' || !layerOf.has(l.digest)) continue;
    const abs = '/' + l.path.replace(/^\/+/, '');
    if (l.event === 'open' || l.event === 'readlink') {
      if (!seen.has(abs)) {
        seen.add(abs);
        files.push(abs);
      }
      if (l.event === 'open' && typeof l.size === 'number') details[abs] ??= { size: l.size };
    } else if (l.event === 'read' && typeof l.bytesRead === 'number') {
      const d = details[abs];
      // several handles (and ALS names) may report: the largest distinct count is the best one
      if (d) d.bytesRead = Math.max(d.bytesRead ?? 0, l.bytesRead);
    }
  }
  if (bad > 0 && files.length === 0) {
    throw new StoreError('E_IO', `the access record has ${bad} unreadable line(s) and no usable entry`);
  }
  return { source: 'store', files, details };
}

export class StoreProfileSource implements ProfileSource {
  readonly name = 'store';

  async record(ctx: ProfileContext): Promise<AccessProfile> {
    if (!ctx.lazyRun) {
      throw new StoreError('E_CONFIG', 'the store profile source needs a lazy run of the image (harness)');
    }
    // kept next to the profile for inspection
    const file = join(ctx.scratch, `${ctx.label ?? `run-${process.pid}`}.accesses.jsonl`);
    await rm(file, { force: true });
    const info = await ctx.lazyRun(file);
    const text = await readFile(file, 'utf8').catch((err: unknown) => {
      throw new StoreError('E_IO', `the store wrote no access record: ${(err as Error).message}`, {
        path: file,
      });
    });
    return profileFromStoreRecord(text, info.layerDigests);
  }
}

export function profileSource(spec: string): ProfileSource {
  if (spec === 'store') return new StoreProfileSource();
  if (spec === 'strace') return new StraceProfileSource();
  if (spec.startsWith('file:')) return new FileProfileSource(spec.slice(5));
  throw new StoreError('E_CONFIG', `unknown profile source "${spec}" (want store, strace or file:<path>)`);
}

/**
 * The prioritize list for one layer: profile files (made relative) that the layer itself provides,
 * assigning each path to the topmost layer that has it (that copy is the one the container reads). Pure.
 */
export function prioritizeForLayers(
  profile: readonly string[],
  layerEntries: readonly ReadonlySet<string>[],
): string[][] {
  const out = layerEntries.map(() => [] as string[]);
  for (const abs of profile) {
    const rel = abs.replace(/^\/+/, '');
    for (let i = layerEntries.length - 1; i >= 0; i--) {
      if (layerEntries[i]!.has(rel)) {
        out[i]!.push(rel);
        break;
      }
    }
  }
  return out;
}
