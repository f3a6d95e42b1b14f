/**
 * The tree nodes a parsed TOC keeps in memory: the TreeNode model laid out for TOCs of hundreds of
 * thousands of entries. What most nodes share (type, permissions, owner, mtime) is one interned
 * NodeMeta per distinct combination; what few nodes have (link target, device numbers, xattrs, a
 * whole-file digest that is not their one chunk's) lives in a NodeExtra that most nodes lack; a
 * file of one chunk holds that chunk's fields itself.
 */
import { compactInteger, IndexChunk, packDigest, unpackDigest } from './index-chunk.js';
import type { Chunk, NodeType, TreeNode } from './model.js';
import { SortedChildren } from './sorted-children.js';

export interface NodeMeta {
  readonly type: NodeType;
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly uname: string | undefined;
  readonly gname: string | undefined;
  readonly mtime: number;
}

export interface NodeExtra {
  readonly linkName: string;
  readonly devMajor: number;
  readonly devMinor: number;
  readonly xattrs: ReadonlyMap<string, Buffer>;
  /** The whole-file digest; SAME_AS_CHUNK: the digest of the file's only chunk. */
  readonly digest: string | undefined | typeof SAME_AS_CHUNK;
}

const SAME_AS_CHUNK = Symbol('digest of the only chunk');

/**
 * Shared, immutable defaults: most nodes have no xattrs and (not being regular files) no chunks,
 * and a Map per node costs ~100 bytes -- 50 MB for a 500k-entry TOC.
 */
class ReadonlyXattrs extends Map<string, Buffer> {
  override set(): this {
    throw new TypeError('the shared empty xattrs map is read-only');
  }
  override delete(): boolean {
    throw new TypeError('the shared empty xattrs map is read-only');
  }
  override clear(): void {
    throw new TypeError('the shared empty xattrs map is read-only');
  }
}
export const NO_XATTRS: Map<string, Buffer> = new ReadonlyXattrs();

/** The chunks of every node without content (frozen: shared by all of them). */
export const NO_CHUNKS: Chunk[] = Object.freeze([]) as unknown as Chunk[];

const NO_EXTRA: NodeExtra = Object.freeze({
  linkName: '',
  devMajor: 0,
  devMinor: 0,
  xattrs: NO_XATTRS,
  digest: undefined,
});
const DIGEST_OF_CHUNK: NodeExtra = Object.freeze({ ...NO_EXTRA, digest: SAME_AS_CHUNK });

const TYPE_CODES: Record<NodeType, number> = { dir: 1, reg: 2, symlink: 3, char: 4, block: 5, fifo: 6 };

/**
 * Interns NodeMeta per layer: a TOC has a few distinct combinations, not one per entry. Looked up
 * by a numeric hash (a string key per entry took ~0.8 us, 0.4 s of a 500,000-entry open), the
 * last one found first (neighbouring entries mostly share theirs).
 */
export class MetaTable {
  private readonly buckets = new Map<number, NodeMeta[]>();
  private last: NodeMeta | undefined;

  /** Arguments, not a NodeMeta: an object per entry would be garbage for all but a few. */
  get(
    type: NodeType,
    mode: number,
    uid: number,
    gid: number,
    uname: string | undefined,
    gname: string | undefined,
    mtime: number,
  ): NodeMeta {
    const last = this.last;
    if (last !== undefined && sameMeta(last, type, mode, uid, gid, uname, gname, mtime)) return last;
    let h = TYPE_CODES[type];
    h = Math.imul(h, 0x01000193) ^ mode;
    h = Math.imul(h, 0x01000193) ^ uid;
    h = Math.imul(h, 0x01000193) ^ gid;
    h = Math.imul(h, 0x01000193) ^ (mtime | 0);
    const bucket = this.buckets.get(h);
    if (bucket !== undefined) {
      for (const known of bucket) {
        if (sameMeta(known, type, mode, uid, gid, uname, gname, mtime)) return (this.last = known);
      }
    }
    const meta: NodeMeta = Object.freeze({ type, mode, uid, gid, uname, gname, mtime });
    if (bucket === undefined) this.buckets.set(h, [meta]);
    else bucket.push(meta);
    return (this.last = meta);
  }
}

function sameMeta(
  a: NodeMeta,
  type: NodeType,
  mode: number,
  uid: number,
  gid: number,
  uname: string | undefined,
  gname: string | undefined,
  mtime: number,
): boolean {
  return (
    a.type === type &&
    a.mode === mode &&
    a.uid === uid &&
    a.gid === gid &&
    a.mtime === mtime &&
    a.uname === uname &&
    a.gname === gname
  );
}

export class IndexNode implements TreeNode {
  id = 0;
  nlink = 1;
  size = 0;
  /**
   * Directories: their children (SortedChildren, or a Map while the tree is built if names
   * arrive out of order). Files of several chunks: the chunks. Files of one chunk: undefined,
   * the chunk is in the sole* fields (an object of its own would cost 48 B more per file).
   */
  private body: ReadonlyMap<string, TreeNode> | Chunk[] | undefined;
  private soleOffset = 0;
  private soleEnd = 0;
  private soleInner = 0;
  private solePacked = '';
  private extra: NodeExtra = NO_EXTRA;

  constructor(
    readonly name: string,
    /** The directory holding the node's first name; undefined for the root. */
    readonly parent: IndexNode | undefined,
    public meta: NodeMeta,
  ) {
    this.body = meta.type === 'dir' ? new SortedChildren() : NO_CHUNKS;
  }

  /** Spelled out on each use from the parents' names: a path per node costs ~54 B. */
  get path(): string {
    if (this.parent === undefined) return '';
    const names = [this.name];
    for (let p = this.parent; p.parent !== undefined; p = p.parent) names.push(p.name);
    return names.reverse().join('/');
  }

  get type(): NodeType {
    return this.meta.type;
  }
  get mode(): number {
    return this.meta.mode;
  }
  get uid(): number {
    return this.meta.uid;
  }
  get gid(): number {
    return this.meta.gid;
  }
  get uname(): string | undefined {
    return this.meta.uname;
  }
  get gname(): string | undefined {
    return this.meta.gname;
  }
  get mtime(): number {
    return this.meta.mtime;
  }
  get linkName(): string {
    return this.extra.linkName;
  }
  get devMajor(): number {
    return this.extra.devMajor;
  }
  get devMinor(): number {
    return this.extra.devMinor;
  }
  get xattrs(): ReadonlyMap<string, Buffer> {
    return this.extra.xattrs;
  }
  get digest(): string | undefined {
    const d = this.extra.digest;
    return d === SAME_AS_CHUNK ? unpackDigest(this.solePacked) : d;
  }

  get children(): ReadonlyMap<string, TreeNode> | undefined {
    const body = this.body;
    return body === undefined || Array.isArray(body) ? undefined : (body as ReadonlyMap<string, TreeNode>);
  }

  /**
   * Regular files: sorted by fileOffset. A file of one chunk answers a new chunk (and array)
   * each time: changing it changes nothing in the tree.
   */
  get chunks(): Chunk[] {
    const body = this.body;
    if (body === undefined) return [this.soleChunk()];
    return Array.isArray(body) ? body : NO_CHUNKS;
  }

  private soleChunk(): IndexChunk {
    return new IndexChunk(0, this.size, this.soleOffset, this.soleEnd, this.soleInner, this.solePacked);
  }

  /**
   * The builder's setter: a file's chunks and its whole-file digest, as the TOC gives them;
   * `sameDigest`: the file is one chunk whose digest is the whole-file digest.
   */
  setContent(chunks: Chunk[], digest: string | undefined, sameDigest: boolean): void {
    const one = chunks.length === 1 ? chunks[0] : undefined;
    if (one !== undefined && one.fileOffset === 0 && one.size === this.size) {
      this.body = undefined;
      this.soleOffset = one.compressedOffset;
      this.soleEnd = one.compressedEnd;
      this.soleInner = one.innerOffset;
      this.solePacked = one instanceof IndexChunk ? one.packedDigest : packDigest(one.digest);
    } else {
      this.body = chunks.length === 0 ? NO_CHUNKS : chunks;
      sameDigest = false;
    }
    if (sameDigest) {
      this.extra = this.extra === NO_EXTRA ? DIGEST_OF_CHUNK : { ...this.extra, digest: SAME_AS_CHUNK };
    } else if (digest !== this.digest) {
      this.extra = { ...this.extra, digest };
    }
  }

  /** The builder's: add or replace a child of this directory. */
  setChild(name: string, node: TreeNode): void {
    const kids = this.children;
    if (kids instanceof SortedChildren && kids.trySet(name, node)) return;
    if (kids instanceof SortedChildren) {
      const map = new Map(kids); // a name out of order: a Map until the directory is done
      map.set(name, node);
      this.body = map;
    } else if (kids instanceof Map) kids.set(name, node);
    else throw new TypeError(`${this.path || '/'} is not a directory`);
  }

  /** The builder's last word on a directory: its children in the compact, read-only form. */
  fixChildren(): void {
    const kids = this.children;
    if (kids instanceof SortedChildren) kids.fix();
    else if (kids instanceof Map) this.body = SortedChildren.from(kids);
  }

  /** The builder's setter for what few nodes have (arguments: most nodes have none of it). */
  setExtra(linkName: string, devMajor: number, devMinor: number, xattrs: ReadonlyMap<string, Buffer>): void {
    const plain = linkName === '' && devMajor === 0 && devMinor === 0 && xattrs.size === 0;
    const digest = this.extra.digest;
    if (plain && digest === undefined) this.extra = NO_EXTRA;
    else if (plain && digest === SAME_AS_CHUNK) this.extra = DIGEST_OF_CHUNK;
    else this.extra = Object.freeze({ linkName, devMajor, devMinor, xattrs, digest });
  }

  /**
   * The builder's: give every chunk whose compressed span is still open (`openEnd`) the end
   * `endOf(chunk)` returns, in fileOffset order.
   */
  closeOpenEnds(openEnd: number, endOf: (chunk: Chunk) => number): void {
    const body = this.body;
    if (body === undefined) {
      if (this.soleEnd === openEnd) this.soleEnd = compactInteger(endOf(this.soleChunk()));
    } else if (Array.isArray(body)) {
      for (const chunk of body as Chunk[]) {
        if (chunk.compressedEnd === openEnd) chunk.compressedEnd = compactInteger(endOf(chunk));
      }
    }
  }
}
