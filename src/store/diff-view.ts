import type { LayerIndex, NodeType, TreeNode } from '../format/model.js';
import { FsError } from '../fs/errno.js';
import { S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG, type Attr, type DirEntry } from '../fs/vfs.js';
import { StoreError } from '../util/errors.js';

/**
 * The overlayfs lower-layer view of a layer's tree (als-client.md §3.3, stargz-format.md §3.5):
 * `.wh.x` entries become char devices 0:0 named `x`, `.wh..wh..opq` becomes the opaque xattr on its
 * directory, the prefetch landmarks disappear from the root.
 */
export const WHITEOUT_PREFIX = '.wh.';
export const OPAQUE_MARKER = '.wh..wh..opq';
export const ROOT_LANDMARKS = new Set(['.prefetch.landmark', '.no.prefetch.landmark']);
export const OPAQUE_XATTRS = ['trusted.overlay.opaque', 'user.overlay.opaque'];
const OPAQUE_VALUE = Buffer.from('y');

/** A node of the view: a real TOC node, or a whiteout synthesised from the `.wh.<name>` entry. */
export interface ViewNode {
  node: TreeNode;
  whiteout: boolean;
}

const TYPE_BITS: Record<NodeType, number> = {
  dir: S_IFDIR,
  reg: S_IFREG,
  symlink: S_IFLNK,
  char: S_IFCHR,
  block: S_IFBLK,
  fifo: S_IFIFO,
};

/** Linux new_encode_dev, truncated to the 32 bits FUSE carries. */
export function makedev(major: number, minor: number): number {
  return ((minor & 0xff) | ((major & 0xfff) << 8) | ((minor & ~0xff) << 12)) >>> 0;
}

/**
 * Compare two strings in UTF-8 byte order (= code point order). JS compares UTF-16 code units,
 * which agrees except where the first difference is a surrogate against U+E000..U+FFFF; only that
 * case needs the slower walk.
 */
export function utf8Compare(a: string, b: string): number {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      // surrogates (astral code points) sort after the rest of the BMP
      const xs = x < 0xe000;
      const ys = y < 0xe000;
      if (xs !== ys) return xs ? 1 : -1;
    }
    return x - y;
  }
  return a.length - b.length;
}

function hasHighUnit(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) >= 0xd800) return true;
  return false;
}

export class DiffView {
  private readonly dirCache = new Map<number, DirEntry[]>();

  /** `inoBase + node.id` is each node's inode number; the caller reserves the range. */
  constructor(
    readonly index: LayerIndex,
    readonly inoBase: number,
  ) {}

  /** Resolve a path inside the layer ('' = root). Throws ENOENT / ENOTDIR like a real directory tree. */
  lookup(sub: string): ViewNode {
    let cur = this.index.root;
    const parts = sub === '' ? [] : sub.split('/');
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i]!;
      const last = i === parts.length - 1;
      if (cur.type !== 'dir' || !cur.children) throw new FsError('ENOTDIR', 'not a directory', { path: sub });
      if (part === '' || part === '.' || part === '..')
        throw new StoreError('E_NOT_FOUND', 'no such entry', { path: sub });
      if (part.startsWith(WHITEOUT_PREFIX))
        throw new StoreError('E_NOT_FOUND', 'no such entry', { path: sub });
      if (cur === this.index.root && ROOT_LANDMARKS.has(part)) {
        throw new StoreError('E_NOT_FOUND', 'no such entry', { path: sub });
      }
      const child = cur.children.get(part);
      if (child) {
        cur = child;
        continue;
      }
      const wh = cur.children.get(WHITEOUT_PREFIX + part);
      if (wh) {
        if (!last) throw new FsError('ENOTDIR', 'not a directory', { path: sub });
        return { node: wh, whiteout: true };
      }
      throw new StoreError('E_NOT_FOUND', 'no such entry', { path: sub });
    }
    return { node: cur, whiteout: false };
  }

  attr(v: ViewNode): Attr {
    const n = v.node;
    const ino = (this.inoBase + n.id) >>> 0;
    if (v.whiteout) {
      return { mode: S_IFCHR, ino, uid: 0, gid: 0, size: 0, nlink: 1, rdev: 0, mtime: n.mtime };
    }
    const size = n.type === 'reg' ? n.size : n.type === 'symlink' ? Buffer.byteLength(n.linkName) : 0;
    return {
      mode: TYPE_BITS[n.type] | (n.mode & 0o7777),
      ino,
      uid: n.uid,
      gid: n.gid,
      size,
      nlink: n.nlink > 0 ? n.nlink : 1,
      rdev: n.type === 'char' || n.type === 'block' ? makedev(n.devMajor, n.devMinor) : 0,
      mtime: n.mtime,
    };
  }

  /** Entries of a directory in bytewise name order, whiteouts as char devices (DT_CHR). */
  readdir(v: ViewNode): DirEntry[] {
    const dir = v.node;
    if (v.whiteout || dir.type !== 'dir' || !dir.children)
      throw new FsError('ENOTDIR', 'not a directory', { path: dir.path });
    const hit = this.dirCache.get(dir.id);
    if (hit) return hit;
    // Bytewise (UTF-8) order like Go, without encoding names (two Buffers per comparison held the
    // main thread for most of a second on a 100k-entry directory): the native comparison is right
    // unless both names have code units from U+D800 up, which are marked once here.
    const keyed: Array<{ entry: DirEntry; high: boolean }> = [];
    const add = (name: string, node: TreeNode, whiteout: boolean) =>
      keyed.push({ entry: { name, attr: this.attr({ node, whiteout }) }, high: hasHighUnit(name) });
    for (const [name, child] of dir.children) {
      if (name === OPAQUE_MARKER) continue;
      if (dir === this.index.root && ROOT_LANDMARKS.has(name)) continue;
      if (name.startsWith(WHITEOUT_PREFIX)) {
        const target = name.slice(WHITEOUT_PREFIX.length);
        // a real entry of the same name wins over its whiteout
        if (target === '' || dir.children.has(target)) continue;
        add(target, child, true);
        continue;
      }
      add(name, child, false);
    }
    keyed.sort((x, y) => {
      const a = x.entry.name;
      const b = y.entry.name;
      if (x.high && y.high) return utf8Compare(a, b);
      return a < b ? -1 : a > b ? 1 : 0;
    });
    const out = keyed.map((k) => k.entry);
    this.dirCache.set(dir.id, out);
    return out;
  }

  private isOpaque(v: ViewNode): boolean {
    return !v.whiteout && v.node.type === 'dir' && v.node.children?.has(OPAQUE_MARKER) === true;
  }

  listxattr(v: ViewNode): string[] {
    if (v.whiteout) return [];
    const names = this.isOpaque(v) ? [...OPAQUE_XATTRS] : [];
    for (const k of v.node.xattrs.keys()) if (!names.includes(k)) names.push(k);
    return names;
  }

  getxattr(v: ViewNode, name: string): Buffer | undefined {
    if (v.whiteout) return undefined;
    if (OPAQUE_XATTRS.includes(name) && this.isOpaque(v)) return OPAQUE_VALUE;
    return v.node.xattrs.get(name);
  }
}
