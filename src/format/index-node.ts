/**
 * The tree nodes a parsed TOC keeps in memory: the TreeNode model laid out for TOCs of hundreds of
 * thousands of entries. What most nodes share (type, permissions, owner, mtime) is one interned
 * NodeMeta per distinct combination; what few nodes have (link target, device numbers, xattrs, a
 * whole-file digest that is not their one chunk's) lives in a NodeExtra that most nodes lack; a
 * file of one chunk holds the chunk itself rather than an array of one.
 */
import { IndexChunk } from './index-chunk.js';
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

  get(meta: NodeMeta): NodeMeta {
    if (this.last !== undefined && sameMeta(this.last, meta)) return this.last;
    let h = TYPE_CODES[meta.type];
    h = Math.imul(h, 0x01000193) ^ meta.mode;
    h = Math.imul(h, 0x01000193) ^ meta.uid;
    h = Math.imul(h, 0x01000193) ^ meta.gid;
    h = Math.imul(h, 0x01000193) ^ (meta.mtime | 0);
    const bucket = this.buckets.get(h);
    if (bucket !== undefined) {
      for (const known of bucket) {
        if (sameMeta(known, meta)) return (this.last = known);
      }
    }
    const frozen = Object.freeze({ ...meta });
    if (bucket === undefined) this.buckets.set(h, [frozen]);
    else bucket.push(frozen);
    return (this.last = frozen);
  }
}

function sameMeta(a: NodeMeta, b: NodeMeta): boolean {
  return (
    a.type === b.type &&
    a.mode === b.mode &&
    a.uid === b.uid &&
    a.gid === b.gid &&
    a.mtime === b.mtime &&
    a.uname === b.uname &&
    a.gname === b.gname
  );
}

export class IndexNode implements TreeNode {
  id = 0;
  nlink = 1;
  size = 0;
  /** A Map while the tree is built, SortedChildren once it is finished. */
  children: ReadonlyMap<string, TreeNode> | undefined;
  private content: IndexChunk | Chunk[] = NO_CHUNKS;
  private extra: NodeExtra = NO_EXTRA;

  constructor(
    readonly name: string,
    /** The directory holding the node's first name; undefined for the root. */
    readonly parent: IndexNode | undefined,
    public meta: NodeMeta,
  ) {
    this.children = meta.type === 'dir' ? new Map() : undefined;
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
    return d === SAME_AS_CHUNK ? (this.content as IndexChunk).digest : d;
  }

  /** Regular files: sorted by fileOffset. A file of one chunk answers a new array each time. */
  get chunks(): Chunk[] {
    const c = this.content;
    return c instanceof IndexChunk ? [c] : c;
  }

  /**
   * The builder's setter: a file's chunks and its whole-file digest, as the TOC gives them;
   * `sameDigest`: the file is one chunk whose digest is the whole-file digest.
   */
  setContent(chunks: Chunk[], digest: string | undefined, sameDigest: boolean): void {
    const one = chunks.length === 1 ? chunks[0] : undefined;
    this.content = one instanceof IndexChunk ? one : chunks.length === 0 ? NO_CHUNKS : chunks;
    if (sameDigest && one instanceof IndexChunk) {
      this.extra = this.extra === NO_EXTRA ? DIGEST_OF_CHUNK : { ...this.extra, digest: SAME_AS_CHUNK };
    } else if (digest !== this.digest) {
      this.extra = { ...this.extra, digest };
    }
  }

  /** The builder's: add or replace a child of this directory. */
  setChild(name: string, node: TreeNode): void {
    if (!(this.children instanceof Map)) throw new TypeError(`${this.path || '/'}: children are fixed`);
    this.children.set(name, node);
  }

  /** The builder's last word on a directory: its children in the compact, read-only form. */
  fixChildren(): void {
    if (this.children instanceof Map) this.children = new SortedChildren(this.children);
  }

  /** The builder's setter for what few nodes have. */
  setExtra(extra: Omit<NodeExtra, 'digest'>): void {
    const plain =
      extra.linkName === '' && extra.devMajor === 0 && extra.devMinor === 0 && extra.xattrs.size === 0;
    const digest = this.extra.digest;
    if (plain && digest === undefined) this.extra = NO_EXTRA;
    else if (plain && digest === SAME_AS_CHUNK) this.extra = DIGEST_OF_CHUNK;
    else this.extra = Object.freeze({ ...extra, digest });
  }
}
