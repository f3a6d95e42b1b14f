import { lstat, readFile, readlink, rm } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { withRootBinds } from './rootfs.js';
import { run, which } from './proc.js';

/**
 * Access profiles: which files a workload's entrypoint opens, in first-open order. They feed the
 * optimised eStargz build (`prioritize`). The source is pluggable:
 *  - `strace`: run the entrypoint under `strace -f` chrooted into the assembled image rootfs (what we
 *    use until the store exposes its own access log);
 *  - `file:<path>`: a recorded list (JSON array of paths, or one path per line) — e.g. what the store's
 *    access recording writes once it exists.
 */

export interface AccessProfile {
  source: string;
  /** Absolute image paths (symlinks resolved to the files they name), first-open order. */
  files: string[];
}

export interface ProfileContext {
  /** The image's root file system, assembled (all layers merged). */
  rootfs: string;
  argv: string[];
  env: string[];
  workingDir: string;
  /** Where a source may put scratch files. */
  scratch: string;
}

export interface ProfileSource {
  readonly name: string;
  record(ctx: ProfileContext): Promise<AccessProfile>;
}

const TRACE_RE = /^(?:\d+\s+)?(openat|open|execve|chroot)\((.*)\)\s+=\s+(-?\d+|\?)/;

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

/**
 * Paths successfully opened or executed AFTER the first successful chroot (earlier events are the
 * host side of `chroot`). Relative paths are resolved against `cwd`. Pure.
 */
export function parseStraceOpens(text: string, cwd = '/'): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  let inRoot = false;
  for (const line of text.split('\n')) {
    const m = TRACE_RE.exec(line.trim());
    if (!m) continue;
    const [, name, args, ret] = m;
    if (ret === '?' || Number(ret) < 0) continue;
    if (name === 'chroot') {
      inRoot = true;
      continue;
    }
    if (!inRoot) continue;
    const p = firstPathArg(name!, args!);
    if (p === undefined || p === '') continue;
    const abs = posix.normalize(p.startsWith('/') ? p : posix.join(cwd, p));
    if (!seen.has(abs)) {
      seen.add(abs);
      out.push(abs);
    }
  }
  return out;
}

/**
 * Resolve an absolute image path inside `root` as the container would (symlinks relative to the image
 * root, at most 40 hops). Returns every path on the way that is itself a symlink, then the final path,
 * or undefined if it does not exist.
 */
export async function resolveInRoot(root: string, abs: string): Promise<{ links: string[]; target: string } | undefined> {
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

/** Keep regular files of the rootfs (plus the symlinks leading to them), in order, without duplicates. */
export async function canonicalizeProfile(root: string, paths: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  const seen = new Set<string>();
  const add = (p: string) => {
    if (!seen.has(p)) {
      seen.add(p);
      out.push(p);
    }
  };
  for (const p of paths) {
    if (/^\/(proc|sys|dev)(\/|$)/.test(p)) continue;
    const r = await resolveInRoot(root, p);
    if (!r) continue;
    const st = await lstat(join(root, r.target)).catch(() => undefined);
    if (!st?.isFile()) continue;
    for (const l of r.links) add(l);
    add(r.target);
  }
  return out;
}

export class StraceProfileSource implements ProfileSource {
  readonly name = 'strace';

  async record(ctx: ProfileContext): Promise<AccessProfile> {
    if (!(await which('strace'))) {
      throw new StoreError('E_NOT_FOUND', 'strace is required to record an access profile (apt package strace)');
    }
    const out = join(ctx.scratch, `strace-${process.pid}.out`);
    // env and unshare are host binaries; unshare --root is the chroot() that starts the recording
    const traced = withRootBinds(ctx.rootfs, [
      'strace',
      '-f',
      '-qq',
      '-s',
      '4096',
      '-e',
      'trace=open,openat,execve,chroot',
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
      throw new StoreError('E_IO', `profile run of ${ctx.argv.join(' ')} failed (exit ${String(r.code)}): ${r.stderr.slice(-800)}`);
    }
    const text = await readFile(out, 'utf8');
    await rm(out, { force: true });
    const files = await canonicalizeProfile(ctx.rootfs, parseStraceOpens(text, ctx.workingDir));
    return { source: 'strace', files };
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
      list = Array.isArray(j)
        ? j.map((e) => (typeof e === 'string' ? e : String((e as { path?: unknown }).path)))
        : (j as { files: string[] }).files;
    } catch {
      list = text.split('\n').map((s) => s.trim());
    }
    const abs = list.filter((s) => s.length > 0).map((s) => (s.startsWith('/') ? s : '/' + s));
    return { source: this.name, files: await canonicalizeProfile(ctx.rootfs, abs) };
  }
}

export function profileSource(spec: string): ProfileSource {
  if (spec === 'strace') return new StraceProfileSource();
  if (spec.startsWith('file:')) return new FileProfileSource(spec.slice(5));
  throw new StoreError('E_CONFIG', `unknown profile source "${spec}" (want strace or file:<path>)`);
}

/**
 * The prioritize list for one layer: profile files (made relative) that the layer itself provides,
 * assigning each path to the topmost layer that has it (that copy is the one the container reads). Pure.
 */
export function prioritizeForLayers(profile: readonly string[], layerEntries: readonly ReadonlySet<string>[]): string[][] {
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
