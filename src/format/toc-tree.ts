/**
 * Normalisation of parsed TOC entries into the shared tree model (spec §1.8): cleaned names,
 * implicit parents, root metadata from `./`, chunk lists with compressed spans, hardlinks
 * resolved to their target node, uname/gname back-fill, link counts, prefetch landmarks.
 */
import { StoreError } from '../util/errors.js';
import type { Chunk, NodeType, PrefetchHint, TreeNode } from './model.js';
import { Slicer, type TocEntry } from './toc.js';
import { cleanEntryName, splitParent } from './toc-names.js';

export const PREFETCH_LANDMARK = '.prefetch.landmark';
export const NO_PREFETCH_LANDMARK = '.no.prefetch.landmark';

export interface TreeLimits {
  /** Data region end: every compressed span must lie inside [0, dataEnd). */
  dataEnd: number;
}

export interface BuiltTree {
  root: TreeNode;
  /** Indexed by id; index 0 is unused. */
  nodes: TreeNode[];
  prefetch: PrefetchHint;
}

/** Go's zero time (0001-01-01T00:00:00Z) in Unix seconds; anything at or before it means "no mtime". */
const GO_ZERO_TIME = -62135596800;
const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** Most entries of a layer share a handful of mtimes: remember the last few conversions. */
const modTimeCache = new Map<string, number>();

/** RFC 3339 -> whole Unix seconds; missing, unparsable or Go-zero -> 0. */
export function parseModTime(text: string | undefined): number {
  if (text === undefined || text === '') return 0;
  const cached = modTimeCache.get(text);
  if (cached !== undefined) return cached;
  const seconds = convertModTime(text);
  if (modTimeCache.size >= 1024) modTimeCache.clear();
  modTimeCache.set(text, seconds);
  return seconds;
}

function convertModTime(text: string): number {
  const m = RFC3339.exec(text);
  if (m === null) return 0;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return 0;
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  date.setUTCHours(h, mi, s, 0);
  let seconds = Math.floor(date.getTime() / 1000);
  if (m[8] !== undefined) {
    const offset = (Number(m[9]) * 60 + Number(m[10])) * 60;
    seconds += m[8] === '+' ? -offset : offset;
  }
  return Number.isFinite(seconds) && seconds > GO_ZERO_TIME ? seconds : 0;
}

function newNode(type: NodeType, path: string): TreeNode {
  const node: TreeNode = {
    id: 0,
    name: splitParent(path)[1],
    path,
    type,
    mode: type === 'dir' ? 0o755 : 0,
    uid: 0,
    gid: 0,
    mtime: 0,
    size: 0,
    linkName: '',
    devMajor: 0,
    devMinor: 0,
    xattrs: new Map(),
    chunks: [],
    nlink: 1,
  };
  if (type === 'dir') node.children = new Map();
  return node;
}

function bad(
  e: TocEntry | undefined,
  message: string,
  extra: Record<string, string | number> = {},
): StoreError {
  const where = e === undefined ? '' : `TOC entry ${e.index} (${JSON.stringify(e.name).slice(0, 120)}): `;
  return new StoreError('E_BAD_TOC', where + message, { ...(e ? { entry: e.index } : {}), ...extra });
}

interface RegFile {
  node: TreeNode;
  /** The reg entry followed by its chunk entries, in TOC order. */
  entries: TocEntry[];
}

interface PendingLink {
  entry: TocEntry;
  path: string;
  parent: TreeNode;
  base: string;
  target: string;
  node?: TreeNode;
  resolving?: boolean;
}

/**
 * Build the tree. Throws E_BAD_TOC / E_HOSTILE_PATH on anything inconsistent. Long loops give
 * the event loop a turn every few milliseconds (big TOCs take seconds to normalise).
 */
export async function buildTree(entries: readonly TocEntry[], limits: TreeLimits): Promise<BuiltTree> {
  const created: TreeNode[] = [];
  const make = (type: NodeType, path: string): TreeNode => {
    const node = newNode(type, path);
    created.push(node);
    return node;
  };
  const root = make('dir', '');
  const dirs = new Map<string, TreeNode>([['', root]]);
  const regFiles: RegFile[] = [];
  const pending: PendingLink[] = [];
  const unames = new Map<number, string>();
  const gnames = new Map<number, string>();

  /** Directory at `path`, creating implicit 0755 parents. */
  const ensureDir = (path: string, e: TocEntry): TreeNode => {
    const known = dirs.get(path);
    if (known !== undefined) return known;
    const [dir, base] = splitParent(path);
    const parent = ensureDir(dir, e);
    const existing = parent.children!.get(base);
    if (existing !== undefined) {
      // dirs are always in `dirs`, so anything found here is not a directory
      throw bad(e, `parent ${JSON.stringify(path)} is not a directory`);
    }
    const node = make('dir', path);
    parent.children!.set(base, node);
    dirs.set(path, node);
    return node;
  };

  const slicer = new Slicer();
  let lastReg: RegFile | undefined;
  for (let i = 0; i < entries.length; i++) {
    if ((i & 255) === 255) await slicer.tick();
    const e = entries[i]!;
    if (e.type === 'chunk') {
      if (lastReg === undefined) throw bad(e, 'chunk entry does not follow a regular file');
      lastReg.entries.push(e);
      continue;
    }
    lastReg = undefined;
    const path = cleanEntryName(e.name, { entry: e.index });
    if (e.linkName.includes('\0')) {
      throw new StoreError('E_HOSTILE_PATH', 'TOC link name contains a NUL byte', { entry: e.index });
    }
    // uname/gname: written once per id by the Go writer; later entries inherit (spec §1.4)
    if (e.userName !== undefined) unames.set(e.uid, e.userName);
    if (e.groupName !== undefined) gnames.set(e.gid, e.groupName);
    if (path === '') {
      if (e.type !== 'dir') throw bad(e, 'the root entry must be a directory');
      applyMeta(root, e, unames, gnames);
      continue;
    }
    const [dir, base] = splitParent(path);
    const parent = ensureDir(dir, e);
    if (e.type === 'hardlink') {
      const target = cleanEntryName(e.linkName, { entry: e.index });
      if (target === '') throw bad(e, 'hardlink to the root');
      pending.push({ entry: e, path, parent, base, target });
      continue;
    }
    const existing = parent.children!.get(base);
    if (existing?.type === 'dir') {
      if (e.type !== 'dir') throw bad(e, 'a non-directory entry replaces a directory');
      applyMeta(existing, e, unames, gnames); // explicit entry for an implicit (or repeated) dir
      continue;
    }
    // A repeated non-directory name: the last entry wins, as in a tar extraction.
    const node = make(e.type, path);
    applyMeta(node, e, unames, gnames);
    parent.children!.set(base, node);
    if (e.type === 'dir') dirs.set(path, node);
    if (e.type === 'reg') {
      lastReg = { node, entries: [e] };
      regFiles.push(lastReg);
    }
  }

  resolveHardlinks(root, pending);

  const memberStarts = dataMemberStarts(entries, limits.dataEnd);
  for (let i = 0; i < regFiles.length; i++) {
    if ((i & 255) === 255) await slicer.tick();
    const file = regFiles[i]!;
    file.node.chunks = buildChunks(file, memberStarts, limits);
  }

  assignLinkCounts(root, created);
  const nodes: TreeNode[] = [];
  let id = 0;
  for (const node of created) {
    if (node.nlink === 0) continue; // unreachable
    node.id = ++id;
    nodes[id] = node;
  }
  return { root, nodes, prefetch: prefetchHint(root) };
}

function applyMeta(
  node: TreeNode,
  e: TocEntry,
  unames: Map<number, string>,
  gnames: Map<number, string>,
): void {
  // c/storage and ctr-remote TOCs store the full st_mode (type bits included): keep permissions only
  node.mode = e.mode & 0o7777;
  node.uid = e.uid;
  node.gid = e.gid;
  const uname = unames.get(e.uid);
  const gname = gnames.get(e.gid);
  if (uname !== undefined) node.uname = uname;
  if (gname !== undefined) node.gname = gname;
  node.mtime = parseModTime(e.modtime);
  node.size = node.type === 'reg' ? e.size : 0;
  node.linkName = node.type === 'symlink' ? e.linkName : '';
  if (node.type === 'char' || node.type === 'block') {
    node.devMajor = e.devMajor;
    node.devMinor = e.devMinor;
  }
  node.xattrs = new Map();
  for (const [k, v] of Object.entries(e.xattrs ?? {})) node.xattrs.set(k, Buffer.from(v, 'base64'));
  if (node.type === 'reg' && e.digest !== undefined) node.digest = e.digest;
}

function lookup(root: TreeNode, path: string): TreeNode | undefined {
  let node: TreeNode | undefined = root;
  for (const part of path.split('/')) {
    node = node.children?.get(part);
    if (node === undefined) return undefined;
  }
  return node;
}

/**
 * Point every hardlink name at its target's node. Targets may themselves be hardlinks (also
 * ones that appear later in the TOC); cycles and unknown targets are errors.
 */
function resolveHardlinks(root: TreeNode, pending: PendingLink[]): void {
  const byPath = new Map<string, PendingLink>();
  for (const link of pending) byPath.set(link.path, link);
  // Iterative (a hostile chain of links must not exhaust the stack).
  const resolve = (first: PendingLink): void => {
    const chain: PendingLink[] = [];
    let link = first;
    let target: TreeNode | undefined;
    for (;;) {
      if (link.node !== undefined) {
        target = link.node;
        break;
      }
      if (link.resolving) throw bad(link.entry, 'hardlink cycle');
      link.resolving = true;
      chain.push(link);
      // a target that is itself a hardlink name resolves through that link
      const other = byPath.get(link.target);
      if (other !== undefined && other !== link) {
        link = other;
        continue;
      }
      target = lookup(root, link.target);
      if (target === undefined)
        throw bad(link.entry, `hardlink target ${JSON.stringify(link.target)} not found`);
      break;
    }
    if (target.type === 'dir') throw bad(first.entry, 'hardlink to a directory');
    for (const l of chain) {
      if (l.parent.children!.get(l.base)?.type === 'dir') throw bad(l.entry, 'hardlink replaces a directory');
      l.parent.children!.set(l.base, target);
      l.node = target;
    }
  };
  for (const link of pending) resolve(link);
}

/**
 * Sorted start offsets of the data members/frames (stargz-style spans end at the next one),
 * plus dataEnd. Entries with innerOffset share a member and do not start one.
 */
function dataMemberStarts(entries: readonly TocEntry[], dataEnd: number): Float64Array {
  const starts: number[] = [];
  let sorted = true;
  for (const e of entries) {
    if ((e.type === 'reg' && e.size > 0) || e.type === 'chunk') {
      if (e.innerOffset === 0 && e.chunkType !== 'zeros') {
        if (starts.length > 0 && e.offset < starts[starts.length - 1]!) sorted = false;
        starts.push(e.offset);
      }
    }
  }
  starts.push(dataEnd);
  // writers emit offsets in ascending order; sort (numerically) only when they did not
  const out = Float64Array.from(starts);
  if (!sorted || dataEnd < (starts[starts.length - 2] ?? 0)) out.sort();
  return out;
}

/** Smallest value in sorted `starts` strictly greater than `offset` (duplicates allowed). */
function nextStart(starts: Float64Array, offset: number): number | undefined {
  let lo = 0;
  let hi = starts.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (starts[mid]! <= offset) lo = mid + 1;
    else hi = mid;
  }
  return starts[lo];
}

function buildChunks(file: RegFile, memberStarts: Float64Array, limits: TreeLimits): Chunk[] {
  const [reg, ...rest] = file.entries as [TocEntry, ...TocEntry[]];
  const size = reg.size;
  if (size === 0) {
    if (rest.length > 0) throw bad(reg, 'empty file with chunk entries');
    return [];
  }
  // containers/storage style: endOffset on the reg entry bounds the file's frames
  const cstorage = reg.endOffset !== undefined;
  // nextOffsets[k]: offset of the first later chunk that has one (linear, whatever the TOC says)
  let nextOffsets: Array<number | undefined> | undefined;
  if (cstorage) {
    nextOffsets = new Array<number | undefined>(file.entries.length);
    let next: number | undefined;
    for (let k = file.entries.length - 1; k >= 0; k--) {
      nextOffsets[k] = next;
      const o = file.entries[k]!.offset;
      if (o > 0) next = o;
    }
  }
  const chunks: Chunk[] = [];
  let expected = 0;
  for (let k = 0; k < file.entries.length; k++) {
    const e = file.entries[k]!;
    const fileOffset = k === 0 ? reg.chunkOffset : e.chunkOffset;
    if (fileOffset !== expected) {
      throw bad(e, `chunks do not tile the file: chunk at ${fileOffset}, expected ${expected}`, {
        offset: fileOffset,
      });
    }
    // chunkSize 0/absent = up to the end of the file (spec §9.3 item 4)
    const chunkSize = e.chunkSize > 0 ? e.chunkSize : size - fileOffset;
    if (chunkSize <= 0 || fileOffset + chunkSize > size) {
      throw bad(e, `chunk [${fileOffset}, ${fileOffset + chunkSize}) exceeds file size ${size}`);
    }
    // chunkDigest, or the whole-file digest for a file that is a single chunk
    const digest = e.chunkDigest ?? (file.entries.length === 1 ? reg.digest : undefined);
    if (digest === undefined) throw bad(e, 'chunk has no digest');
    const zeros = e.chunkType === 'zeros';
    let compressedOffset: number;
    let compressedEnd: number;
    if (zeros) {
      // no data to fetch; keep the span empty at a sensible position
      compressedOffset = e.offset > 0 ? e.offset : (chunks[k - 1]?.compressedEnd ?? reg.offset);
      compressedEnd = compressedOffset;
      if (compressedOffset > limits.dataEnd) throw bad(e, 'chunk offset beyond the data region');
    } else {
      compressedOffset = e.offset;
      let end: number | undefined;
      if (cstorage) {
        // each chunk is its own frame(s): it ends where the next chunk (with an offset) starts,
        // the last one at the file's endOffset (on the reg entry); a chunk entry's own
        // endOffset wins if present. Offsets must ascend, or the span is empty and refused.
        end = k > 0 && e.endOffset !== undefined ? e.endOffset : (nextOffsets![k] ?? reg.endOffset);
      } else {
        end = nextStart(memberStarts, compressedOffset);
      }
      if (
        end === undefined ||
        compressedOffset >= limits.dataEnd ||
        end > limits.dataEnd ||
        end <= compressedOffset
      ) {
        throw bad(
          e,
          `compressed span [${compressedOffset}, ${end}) is outside the data region [0, ${limits.dataEnd})`,
          {
            offset: compressedOffset,
          },
        );
      }
      compressedEnd = end;
    }
    const chunk: Chunk = {
      fileOffset,
      size: chunkSize,
      compressedOffset,
      compressedEnd,
      innerOffset: zeros ? 0 : e.innerOffset,
      digest,
    };
    if (zeros) chunk.zeros = true;
    chunks.push(chunk);
    expected = fileOffset + chunkSize;
  }
  if (expected !== size) throw bad(reg, `chunks cover ${expected} of ${size} bytes`);
  return chunks;
}

/**
 * nlink: dirs 2 + subdirectories; others one per name. Nodes no name points at any more
 * (replaced duplicates) end with nlink 0. Counters live on the nodes: no per-node maps.
 */
function assignLinkCounts(root: TreeNode, created: readonly TreeNode[]): void {
  for (const node of created) node.nlink = 0;
  const stack: TreeNode[] = [root];
  while (stack.length > 0) {
    const dir = stack.pop()!;
    let subdirs = 0;
    for (const child of dir.children!.values()) {
      if (child.type === 'dir') {
        subdirs++;
        stack.push(child); // a directory has exactly one name, so it is visited once
      } else {
        child.nlink++;
      }
    }
    dir.nlink = 2 + subdirs;
  }
}

function prefetchHint(root: TreeNode): PrefetchHint {
  if (root.children!.has(NO_PREFETCH_LANDMARK)) return { kind: 'none' };
  const landmark = root.children!.get(PREFETCH_LANDMARK);
  if (landmark !== undefined) return { kind: 'landmark', end: landmark.chunks[0]?.compressedOffset ?? 0 };
  return { kind: 'default' };
}
