/**
 * The one in-memory file-tree model shared by every layer format (eStargz, both zstd:chunked
 * flavours). Readers normalise their TOC into this; the cache, the layer engine and FUSE only
 * ever see this model.
 */

export type LayerFormat = 'estargz' | 'zstd:chunked' | 'zstd:chunked-legacy';
export type Compression = 'gzip' | 'zstd';
/** Node types after hardlink resolution (a hardlink is just another name for its target node). */
export type NodeType = 'dir' | 'reg' | 'symlink' | 'char' | 'block' | 'fifo';

/** One verified unit of a regular file's content. */
export interface Chunk {
  /** Offset of this chunk inside the file. */
  fileOffset: number;
  /** Uncompressed length in bytes. */
  size: number;
  /** Compressed blob offset where decoding starts (gzip member / zstd frame start). */
  compressedOffset: number;
  /** Exclusive end of the compressed span that has to be fetched to decode this chunk. */
  compressedEnd: number;
  /** Uncompressed bytes to discard after decoding from `compressedOffset` (eStargz `innerOffset`). */
  innerOffset: number;
  /** `sha256:<hex>` of the chunk's uncompressed bytes. Every use is checked against it. */
  digest: string;
  /** containers/storage `chunkType: "zeros"`: no compressed data, the content is `size` zero bytes. */
  zeros?: boolean;
}

/** A node of a layer's tree. Parsed TOCs hold IndexNode (format/index-node.ts), a compact layout. */
export interface TreeNode {
  /** Stable id within the layer (root = 1), assigned in TOC order; FUSE derives inode numbers from it. */
  id: number;
  /** Base name ('' for the root). */
  name: string;
  /** Cleaned path relative to the layer root, no leading or trailing '/', '' for the root. */
  path: string;
  readonly type: NodeType;
  /** Permission bits only (mask 0o7777: perm + setuid/setgid/sticky); the type comes from `type`. */
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly uname?: string;
  readonly gname?: string;
  /** Modification time, whole seconds since the epoch; 0 when the TOC has none. */
  readonly mtime: number;
  /** Logical size of a regular file; 0 for everything else (symlink size is linkName's length). */
  size: number;
  /** Symlink target (as stored); '' otherwise. */
  readonly linkName: string;
  readonly devMajor: number;
  readonly devMinor: number;
  /** Extended attributes, values decoded to bytes. */
  readonly xattrs: ReadonlyMap<string, Buffer>;
  /** Whole-file digest when the TOC has one (informational: chunks are what is verified). */
  readonly digest?: string;
  /** Regular files: chunks sorted by fileOffset, covering [0, size) without gaps. Empty for size 0. */
  readonly chunks: Chunk[];
  /** Link count: names for files (hardlinks), 2 + subdirectories for directories. */
  nlink: number;
  /** Directories only: children by base name (hardlink names point at their target node). */
  children?: ReadonlyMap<string, TreeNode>;
}

export type PrefetchHint =
  /** `.prefetch.landmark`: everything stored before compressed offset `end` is wanted at start. */
  | { kind: 'landmark'; end: number }
  /** `.no.prefetch.landmark`: prefetch nothing. */
  | { kind: 'none' }
  /** No landmark: use the configured default prefetch size. */
  | { kind: 'default' };

export interface LayerIndex {
  format: LayerFormat;
  compression: Compression;
  blobSize: number;
  /** Compressed offset where the TOC (member or skippable frame payload) starts. */
  tocOffset: number;
  /**
   * The digest containers/storage uses as the layer's TOC key: sha256 of the uncompressed TOC JSON
   * for eStargz (`containerd.io/snapshot/stargz/toc.digest`), sha256 of the compressed manifest for
   * zstd:chunked (`*.zstd-chunked.manifest-checksum`).
   */
  tocDigest: string;
  /** sha256 of the uncompressed TOC JSON (stargz's definition for every format). */
  tocJsonDigest: string;
  /** zstd:chunked only: sha256 of the compressed manifest bytes. */
  manifestChecksum?: string;
  /** zstd:chunked (current flavour): the TOC's `tarSplitDigest` (sha256 of the compressed tar-split). */
  tarSplitDigest?: string;
  root: TreeNode;
  /** All nodes indexed by id (index 0 unused). */
  nodes: TreeNode[];
  prefetch: PrefetchHint;
  /** End of the data region (start of TOC/tar-split/footer framing). */
  dataEnd: number;
}

/** Find a node by path ('a/b/c', leading './' or '/' tolerated). Does not follow symlinks. */
export function lookupPath(index: LayerIndex, path: string): TreeNode | undefined {
  let node: TreeNode | undefined = index.root;
  for (const part of path.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') return undefined;
    node = node.children?.get(part);
    if (node === undefined) return undefined;
  }
  return node;
}

/** Chunks of `node` overlapping file range [offset, offset+length). */
export function chunksForRange(node: TreeNode, offset: number, length: number): Chunk[] {
  const end = Math.min(node.size, offset + length);
  if (offset >= end) return [];
  const chunks = node.chunks;
  // binary search for the first chunk whose end is past offset
  let lo = 0;
  let hi = chunks.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const c = chunks[mid]!;
    if (c.fileOffset + c.size <= offset) lo = mid + 1;
    else hi = mid;
  }
  const out: Chunk[] = [];
  for (let i = lo; i < chunks.length; i++) {
    const c = chunks[i]!;
    if (c.fileOffset >= end) break;
    out.push(c);
  }
  return out;
}
