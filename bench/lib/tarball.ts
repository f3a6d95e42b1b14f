import { lstat, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { run } from './proc.js';

/**
 * Layer tars ("rootfs diff tars") made with GNU tar from a directory: entry names relative, without
 * "./" and without a root entry, parents before children, numeric owners, PAX format without
 * atime/ctime/sub-second mtime records (so headers stay ustar-sized), user.* and security.capability
 * xattrs. An overlayfs upper directory can be turned into an OCI diff: 0:0 character devices become
 * `.wh.<name>` whiteouts and directories marked trusted.overlay.opaque=y get `.wh..wh..opq`.
 */

export type EntryKind = 'file' | 'dir' | 'symlink' | 'char' | 'block' | 'fifo' | 'socket';

export interface TreeEntry {
  /** Relative path, '/'-separated, no leading './'. */
  path: string;
  kind: EntryKind;
  size: number;
  rdev: number;
}

/** Depth-first walk with names sorted bytewise, so every directory precedes its contents. */
export async function walkTree(root: string): Promise<TreeEntry[]> {
  const out: TreeEntry[] = [];
  const visit = async (rel: string) => {
    const names = (await readdir(rel ? join(root, rel) : root)).sort((a, b) =>
      Buffer.compare(Buffer.from(a), Buffer.from(b)),
    );
    for (const name of names) {
      const p = rel ? `${rel}/${name}` : name;
      const st = await lstat(join(root, p));
      const kind: EntryKind = st.isFile()
        ? 'file'
        : st.isDirectory()
          ? 'dir'
          : st.isSymbolicLink()
            ? 'symlink'
            : st.isCharacterDevice()
              ? 'char'
              : st.isBlockDevice()
                ? 'block'
                : st.isFIFO()
                  ? 'fifo'
                  : 'socket';
      out.push({ path: p, kind, size: st.size, rdev: st.rdev });
      if (kind === 'dir') await visit(p);
    }
  };
  await visit('');
  return out;
}

export interface LayerTar {
  path: string;
  size: number;
  /** Regular files in the layer (relative paths), for matching access profiles to layers. */
  files: string[];
  /** Every entry name, whiteouts included. */
  entries: string[];
}

/** Directories of an overlay upper dir that carry trusted.overlay.opaque=y (needs python3: Node has no xattr API). */
export async function opaqueDirs(root: string, dirs: readonly string[]): Promise<string[]> {
  if (dirs.length === 0) return [];
  const script = [
    'import os, sys',
    'root = sys.argv[1]',
    'for rel in sys.stdin.read().split("\\0"):',
    '    if not rel: continue',
    '    try:',
    '        if os.getxattr(os.path.join(root, rel), "trusted.overlay.opaque", follow_symlinks=False) == b"y":',
    '            sys.stdout.write(rel + "\\0")',
    '    except OSError:',
    '        pass',
  ].join('\n');
  const r = await run('python3', ['-c', script, root], { input: dirs.join('\0') + '\0' });
  return r.stdout.split('\0').filter((s) => s.length > 0);
}

export interface CreateTarOptions {
  root: string;
  out: string;
  /** Treat `root` as an overlayfs upper directory (convert whiteouts and opaque markers). */
  overlayUpper?: boolean;
  /** Scratch dir for whiteout files (default: <out>.wh). */
  scratch?: string;
}

export async function createLayerTar(opts: CreateTarOptions): Promise<LayerTar> {
  const tree = await walkTree(opts.root);
  const keep: string[] = [];
  const whiteouts: string[] = [];
  for (const e of tree) {
    if (opts.overlayUpper && e.kind === 'char' && e.rdev === 0) {
      const dir = dirname(e.path);
      const base = e.path.slice(dir === '.' ? 0 : dir.length + 1);
      whiteouts.push(dir === '.' ? `.wh.${base}` : `${dir}/.wh.${base}`);
      continue;
    }
    keep.push(e.path);
  }
  if (opts.overlayUpper) {
    const dirs = tree.filter((e) => e.kind === 'dir').map((e) => e.path);
    for (const d of await opaqueDirs(opts.root, dirs)) whiteouts.push(`${d}/.wh..wh..opq`);
  }
  const listFile = `${opts.out}.list`;
  await mkdir(dirname(opts.out), { recursive: true });
  await writeFile(listFile, keep.join('\0') + (keep.length ? '\0' : ''));
  const common = [
    '--format=pax',
    '--pax-option=delete=atime,delete=ctime,delete=mtime',
    '--numeric-owner',
    '--xattrs',
    '--xattrs-include=user.*',
    '--xattrs-include=security.capability',
    '--no-recursion',
    '--verbatim-files-from',
    '--null',
  ];
  await run('tar', ['--create', '--file', opts.out, ...common, '-C', opts.root, '-T', listFile], {
    timeoutMs: 60 * 60_000,
  });
  if (whiteouts.length > 0) {
    // whiteouts are ordinary empty files in the OCI layer format; made in a scratch tree and appended
    const scratch = opts.scratch ?? `${opts.out}.wh`;
    await rm(scratch, { recursive: true, force: true });
    for (const w of whiteouts) {
      await mkdir(join(scratch, dirname(w)), { recursive: true });
      await writeFile(join(scratch, w), '');
    }
    await writeFile(listFile, whiteouts.join('\0') + '\0');
    await run('tar', ['--append', '--file', opts.out, ...common, '-C', scratch, '-T', listFile]);
    await rm(scratch, { recursive: true, force: true });
  }
  await rm(listFile, { force: true });
  const st = await lstat(opts.out);
  if (!st.isFile() || st.size === 0) throw new StoreError('E_IO', `tar produced nothing at ${opts.out}`);
  return {
    path: opts.out,
    size: st.size,
    files: tree.filter((e) => e.kind === 'file').map((e) => e.path),
    entries: [...keep, ...whiteouts],
  };
}
