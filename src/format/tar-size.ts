import type { LayerIndex, TreeNode } from './model.js';

const BLOCK = 512;
const pad = (n: number) => Math.ceil(n / BLOCK) * BLOCK;
/** End-of-archive: two zero blocks (Go's archive/tar writes nothing after them). */
const END_OF_ARCHIVE = 2 * BLOCK;
/** USTAR field limits (Go archive/tar: nameSize, prefixSize, 32-byte user/group names, octal widths). */
const NAME_SIZE = 100;
const PREFIX_SIZE = 155;
const OWNER_SIZE = 32;
const MAX_OCTAL_ID = 0o7777777;
const MAX_OCTAL_SIZE = 0o77777777777;

/** Go's isASCII: no NUL and nothing above 0x7f. */
function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0 || c > 0x7f) return false;
  }
  return true;
}

/** Go's splitUSTARPath: can a long (ASCII) name be stored as prefix + '/' + name? */
function splitsUstar(name: string): boolean {
  let length = name.length;
  if (length <= NAME_SIZE || !isAscii(name)) return false;
  if (length > PREFIX_SIZE + 1) length = PREFIX_SIZE + 1;
  else if (name[length - 1] === '/') length--;
  const i = name.lastIndexOf('/', length - 1);
  const nlen = name.length - i - 1;
  return i > 0 && nlen <= NAME_SIZE && nlen !== 0 && i <= PREFIX_SIZE;
}

/** Length of one PAX record `"%d %s=%s\n"` (the number counts the whole record, itself included). */
function paxRecordLength(keyBytes: number, valueBytes: number): number {
  const base = keyBytes + valueBytes + 3;
  let size = base + String(base).length;
  if (String(size).length + base !== size) size = base + String(size).length;
  return size;
}

/**
 * Bytes of the PAX extended header (block + padded records) Go's writer emits for one entry, or 0.
 * Like Go, a long or non-ASCII path is recorded whenever the header has to be PAX at all, but on
 * its own it only forces PAX when it cannot be split into USTAR prefix + name.
 */
function paxBytes(name: string, linkName: string, n: TreeNode, size: number): number {
  let records = 0;
  let needsPax = false;
  const str = (v: string, limit: number, key: string, splittable: boolean) => {
    if (Buffer.byteLength(v) > limit || !isAscii(v)) {
      records += paxRecordLength(key.length, Buffer.byteLength(v));
      if (!(splittable && splitsUstar(v))) needsPax = true;
    }
  };
  const num = (v: number, max: number, key: string) => {
    if (v > max) {
      records += paxRecordLength(key.length, String(v).length);
      needsPax = true;
    }
  };
  str(name, NAME_SIZE, 'path', true);
  str(linkName, NAME_SIZE, 'linkpath', false);
  if (n.uname !== undefined) str(n.uname, OWNER_SIZE, 'uname', false);
  if (n.gname !== undefined) str(n.gname, OWNER_SIZE, 'gname', false);
  num(n.uid, MAX_OCTAL_ID, 'uid');
  num(n.gid, MAX_OCTAL_ID, 'gid');
  num(size, MAX_OCTAL_SIZE, 'size');
  for (const [k, v] of n.xattrs) {
    records += paxRecordLength(Buffer.byteLength(`SCHILY.xattr.${k}`), v.length);
    needsPax = true;
  }
  return needsPax ? BLOCK + pad(records) : 0;
}

export interface TocTarSize {
  size: number;
  /** Entries (headers) counted, hardlink names included. */
  entries: number;
}

/**
 * The uncompressed tar size re-derived from a TOC, for the OLD `info` diff-size when the layer
 * has no `io.containers.estargz.uncompressed-size` annotation, no tar-split (legacy zstd:chunked)
 * and no full fetch measured it yet.
 *
 * It models Go's archive/tar as used by containers/storage and moby (the producers of such layers):
 * a USTAR header per entry (long ASCII names split into prefix/name when they can be), a PAX header
 * when a field does not fit (path or link over 100 bytes or not ASCII, user/group names over 32
 * bytes, ids over 2097151, files of 8 GiB or more, xattrs as `SCHILY.xattr.*`), one header per
 * extra hardlink name, content padded to 512 bytes, and two zero blocks at the end.
 *
 * The result is exact when the layer's tar was written that way AND every header is re-derivable
 * from the TOC, i.e. the tar has: one entry per TOC node (no implicit parent directories, no
 * duplicated paths, no `./` root entry), entry names without a `./` prefix (directories ending in
 * `/`), whole-second modification times and no access/change times (moby truncates them; otherwise
 * Go adds PAX time records), no other PAX records, and nothing after the end-of-archive blocks
 * (GNU tar pads to 10 KiB records, which makes it an underestimate). Otherwise it is an estimate,
 * usually within a few hundred bytes per deviating entry.
 */
export function tocTarSize(index: Pick<LayerIndex, 'root'>): TocTarSize {
  let total = END_OF_ARCHIVE;
  let entries = 0;
  const header = (name: string, linkName: string, n: TreeNode, size: number) => {
    total += BLOCK + paxBytes(name, linkName, n, size) + pad(size);
    entries++;
  };
  // walk directories, so hardlink names (children that point at a node stored under another path)
  // are counted as their own link headers
  const stack: TreeNode[] = [index.root];
  while (stack.length > 0) {
    const dir = stack.pop()!;
    for (const [name, child] of dir.children ?? []) {
      const path = dir.path === '' ? name : `${dir.path}/${name}`;
      if (child.path !== path) {
        header(path, child.path, child, 0); // hardlink
        continue;
      }
      if (child.type === 'dir') {
        header(`${path}/`, '', child, 0);
        stack.push(child);
      } else {
        header(
          path,
          child.type === 'symlink' ? child.linkName : '',
          child,
          child.type === 'reg' ? child.size : 0,
        );
      }
    }
  }
  return { size: total, entries };
}

/** Just the size (see tocTarSize). */
export function estimateTarSize(index: Pick<LayerIndex, 'root'>): number {
  return tocTarSize(index).size;
}
