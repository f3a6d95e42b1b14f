/**
 * Normalisation of parsed TOC entries into the shared tree model (spec §1.8): cleaned names,
 * implicit parents, root metadata from `./`, chunk lists with compressed spans, hardlinks
 * resolved to their target node, uname/gname back-fill, link counts, prefetch landmarks.
 */
import { StoreError } from '../util/errors.js';
import { IndexNode, MetaTable, NO_XATTRS } from './index-node.js';
import type { NodeType, PrefetchHint, TreeNode } from './model.js';
import { Slicer, type TocEntry } from './toc.js';
import { cleanEntryName, splitParent } from './toc-names.js';
import { bad, buildChunks, checkSpan, nextStart, OPEN_END, type OpenFile } from './toc-chunks.js';
import { NumberList } from '../util/number-list.js';
import { ownString } from '../util/own-string.js';

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

interface PendingLink {
  entry: TocEntry;
  path: string;
  parent: IndexNode;
  base: string;
  target: string;
  node?: TreeNode;
  resolving?: boolean;
}

/**
 * Builds the tree one entry at a time, so a TOC never has to exist as a list of entries: a
 * regular file's chunks become Chunk objects as soon as its last chunk entry has been seen, and
 * only what needs the whole TOC (stargz-style span ends, hardlinks, link counts, ids) waits for
 * finish(). Throws E_BAD_TOC / E_HOSTILE_PATH on anything inconsistent.
 */
export class TreeBuilder {
  private readonly created: IndexNode[] = [];
  private readonly root: IndexNode;
  private readonly dirs = new Map<string, IndexNode>();
  private readonly metas = new MetaTable();
  private readonly pending: PendingLink[] = [];
  private readonly unames = new Map<number, string>();
  private readonly gnames = new Map<number, string>();
  private open: OpenFile | undefined;
  /** Start offsets of data members/frames, for stargz-style span ends. */
  private readonly starts = new NumberList();
  private startsSorted = true;
  /** TOC indexes of the chunks whose ends wait for finish() (OPEN_END), in TOC order. */
  private readonly openSpans = new NumberList();

  constructor(private readonly limits: TreeLimits) {
    this.root = this.make('dir', undefined, '');
    this.dirs.set('', this.root);
  }

  private make(type: NodeType, parent: IndexNode | undefined, name: string): IndexNode {
    // as the TOC's implicit entries make it: a 0755 directory, or a type with nothing set
    const meta = this.metas.get(type, type === 'dir' ? 0o755 : 0, 0, 0, undefined, undefined, 0);
    const node = new IndexNode(ownString(name), parent, meta);
    this.created.push(node);
    return node;
  }

  /** Directory at `path`, creating implicit 0755 parents. */
  private ensureDir(path: string, e: TocEntry): IndexNode {
    const known = this.dirs.get(path);
    if (known !== undefined) return known;
    const [dir, base] = splitParent(path);
    const parent = this.ensureDir(dir, e);
    const existing = parent.children!.get(base);
    if (existing !== undefined) {
      // dirs are always in `dirs`, so anything found here is not a directory
      throw bad(e, `parent ${JSON.stringify(path)} is not a directory`);
    }
    const node = this.make('dir', parent, base);
    parent.setChild(node.name, node); // the owned copy: `base` is a view of the path
    this.dirs.set(path, node);
    return node;
  }

  private addStart(e: TocEntry): void {
    if ((e.type === 'reg' && e.size > 0) || e.type === 'chunk') {
      if (e.innerOffset === 0 && e.chunkType !== 'zeros') {
        const starts = this.starts;
        if (starts.length > 0 && e.offset < starts.at(starts.length - 1)) this.startsSorted = false;
        starts.push(e.offset);
      }
    }
  }

  add(e: TocEntry): void {
    this.addStart(e);
    if (e.type === 'chunk') {
      if (this.open === undefined) throw bad(e, 'chunk entry does not follow a regular file');
      this.open.entries.push(e);
      return;
    }
    this.closeFile();
    const path = cleanEntryName(e.name, { entry: e.index });
    if (e.linkName.includes('\0')) {
      throw new StoreError('E_HOSTILE_PATH', 'TOC link name contains a NUL byte', { entry: e.index });
    }
    // uname/gname: written once per id by the Go writer; later entries inherit (spec §1.4)
    if (e.userName !== undefined) this.unames.set(e.uid, e.userName);
    if (e.groupName !== undefined) this.gnames.set(e.gid, e.groupName);
    if (path === '') {
      if (e.type !== 'dir') throw bad(e, 'the root entry must be a directory');
      this.applyMeta(this.root, e);
      return;
    }
    const [dir, base] = splitParent(path);
    const parent = this.ensureDir(dir, e);
    if (e.type === 'hardlink') {
      const target = cleanEntryName(e.linkName, { entry: e.index });
      if (target === '') throw bad(e, 'hardlink to the root');
      this.pending.push({ entry: e, path, parent, base, target });
      return;
    }
    const existing = parent.children!.get(base);
    if (existing?.type === 'dir') {
      if (e.type !== 'dir') throw bad(e, 'a non-directory entry replaces a directory');
      this.applyMeta(existing as IndexNode, e); // explicit entry for an implicit (or repeated) dir
      return;
    }
    // A repeated non-directory name: the last entry wins, as in a tar extraction.
    const node = this.make(e.type, parent, base);
    this.applyMeta(node, e);
    parent.setChild(node.name, node);
    if (e.type === 'dir') this.dirs.set(path, node);
    if (e.type === 'reg') this.open = { node, reg: e, entries: [e] };
  }

  /**
   * stargz style: a span ends where the next data member starts (or at dataEnd). The chunks
   * waiting for it are found again in TOC order, as they were opened.
   */
  private async closeSpans(slicer: Slicer): Promise<void> {
    const count = this.starts.length;
    const starts = this.starts.view(1);
    starts[count] = this.limits.dataEnd;
    if (!this.startsSorted || this.limits.dataEnd < (starts[count - 1] ?? 0)) starts.sort();
    let open = 0;
    for (let i = 0; i < this.created.length && open < this.openSpans.length; i++) {
      if ((i & 1023) === 1023) await slicer.tick();
      const node = this.created[i]!;
      if (node.type !== 'reg') continue;
      node.closeOpenEnds(OPEN_END, (chunk) => {
        const end = nextStart(starts, chunk.compressedOffset);
        if (end === undefined || end > this.limits.dataEnd || end <= chunk.compressedOffset) {
          checkSpan(
            { index: this.openSpans.at(open), name: node.path },
            chunk.compressedOffset,
            end,
            this.limits,
          );
        }
        open++;
        return end!;
      });
    }
  }

  /** The open file's entries are complete: turn them into chunks. */
  private closeFile(): void {
    const file = this.open;
    if (file === undefined) return;
    this.open = undefined;
    const reg = file.reg;
    // toc.ts gives a chunk digest equal to the file's digest the same string
    const sameDigest = file.entries.length === 1 && (reg.chunkDigest ?? reg.digest) === reg.digest;
    file.node.setContent(buildChunks(file, this.limits, this.openSpans), reg.digest, sameDigest);
  }

  private applyMeta(node: IndexNode, e: TocEntry): void {
    const type = node.type;
    node.meta = this.metas.get(
      type,
      // c/storage and ctr-remote TOCs store the full st_mode (type bits included): keep permissions only
      e.mode & 0o7777,
      e.uid,
      e.gid,
      this.unames.get(e.uid) ?? node.uname,
      this.gnames.get(e.gid) ?? node.gname,
      parseModTime(e.modtime),
    );
    node.size = type === 'reg' ? e.size : 0;
    const device = type === 'char' || type === 'block';
    node.setExtra(
      type === 'symlink' ? e.linkName : '',
      device ? e.devMajor : 0,
      device ? e.devMinor : 0,
      decodeXattrs(e.xattrs),
    );
  }

  async finish(slicer: Slicer): Promise<BuiltTree> {
    this.closeFile();
    resolveHardlinks(this.root, this.pending);
    await this.closeSpans(slicer);
    const { root, created } = this;
    await assignLinkCounts(root, created, slicer);
    const nodes: TreeNode[] = [];
    let id = 0;
    for (let i = 0; i < created.length; i++) {
      if ((i & 4095) === 4095) await slicer.tick();
      const node = created[i]!;
      if (node.nlink === 0) continue; // unreachable
      node.id = ++id;
      nodes[id] = node;
    }
    return { root, nodes, prefetch: prefetchHint(root) };
  }
}

/** Build the tree from a list of entries (tests and small TOCs). */
export async function buildTree(entries: readonly TocEntry[], limits: TreeLimits): Promise<BuiltTree> {
  const builder = new TreeBuilder(limits);
  const slicer = new Slicer();
  for (let i = 0; i < entries.length; i++) {
    if ((i & 255) === 255) await slicer.tick();
    builder.add(entries[i]!);
  }
  return await builder.finish(slicer);
}

function decodeXattrs(xattrs: Record<string, string> | undefined): Map<string, Buffer> {
  const list = xattrs === undefined ? [] : Object.entries(xattrs);
  if (list.length === 0) return NO_XATTRS;
  const out = new Map<string, Buffer>();
  for (const [k, v] of list) out.set(k, Buffer.from(v, 'base64'));
  return out;
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
      l.parent.setChild(ownString(l.base), target);
      l.node = target;
    }
  };
  for (const link of pending) resolve(link);
}

/**
 * nlink: dirs 2 + subdirectories; others one per name. Nodes no name points at any more
 * (replaced duplicates) end with nlink 0. Counters live on the nodes: no per-node maps.
 * Every directory's children are final here and take their compact form.
 */
async function assignLinkCounts(
  root: IndexNode,
  created: readonly IndexNode[],
  slicer: Slicer,
): Promise<void> {
  for (const node of created) node.nlink = 0;
  const stack: IndexNode[] = [root];
  let visited = 0;
  while (stack.length > 0) {
    if ((++visited & 1023) === 1023) await slicer.tick();
    const dir = stack.pop()!;
    let subdirs = 0;
    for (const child of dir.children!.values()) {
      if (child.type === 'dir') {
        subdirs++;
        stack.push(child as IndexNode); // a directory has exactly one name, so it is visited once
      } else {
        child.nlink++;
      }
    }
    dir.nlink = 2 + subdirs;
    dir.fixChildren();
  }
}

function prefetchHint(root: TreeNode): PrefetchHint {
  if (root.children!.has(NO_PREFETCH_LANDMARK)) return { kind: 'none' };
  const landmark = root.children!.get(PREFETCH_LANDMARK);
  if (landmark !== undefined) return { kind: 'landmark', end: landmark.chunks[0]?.compressedOffset ?? 0 };
  return { kind: 'default' };
}
