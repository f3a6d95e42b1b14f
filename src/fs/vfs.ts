/**
 * The contract between the FUSE adapter and whatever serves the tree. Everything is path based
 * (libfuse2 high-level API): `getattr` doubles as LOOKUP. The adapter knows nothing of HTTP, layers or
 * formats; implementations throw StoreError and the adapter maps codes to errnos at the edge.
 */

export const S_IFMT = 0o170000;
export const S_IFSOCK = 0o140000;
export const S_IFLNK = 0o120000;
export const S_IFREG = 0o100000;
export const S_IFBLK = 0o060000;
export const S_IFDIR = 0o040000;
export const S_IFCHR = 0o020000;
export const S_IFIFO = 0o010000;

/** Attributes of one node. Times are whole seconds since the epoch (fuse-native cannot carry negatives). */
export interface Attr {
  /** Full st_mode: type bits | permission bits. */
  mode: number;
  /** Inode number; fuse-native carries 32 bits only. */
  ino: number;
  uid: number;
  gid: number;
  size: number;
  nlink: number;
  /** Linux-encoded device number (new_encode_dev), 32 bits. */
  rdev: number;
  mtime: number;
  atime?: number;
  ctime?: number;
}

/** Attributes of a synthetic root-owned 0755 directory (the mount root, `.` entries). */
export const ROOT_DIR_ATTR: Readonly<Attr> = Object.freeze({
  mode: S_IFDIR | 0o755,
  ino: 1,
  uid: 0,
  gid: 0,
  size: 0,
  nlink: 2,
  rdev: 0,
  mtime: 0,
});

export interface DirEntry {
  name: string;
  /** Full attributes: the adapter passes them to readdir so d_type (e.g. DT_CHR whiteouts) is right. */
  attr: Attr;
}

export interface OpenFile {
  /**
   * Bytes [offset, offset+length) clipped at EOF (a short or empty buffer at EOF is fine). Must honour
   * `signal`: when it aborts the adapter has already answered and drops the result. `transient`:
   * the caller copies the bytes before the event loop turns (ReadOptions.transient).
   */
  read(offset: number, length: number, signal: AbortSignal, transient?: boolean): Promise<Buffer>;
  /** Optional clean-up when the kernel releases the handle. */
  release?(): void;
}

export interface StatFs {
  bsize: number;
  frsize: number;
  blocks: number;
  bfree: number;
  bavail: number;
  files: number;
  ffree: number;
  favail: number;
  namemax: number;
}

/**
 * What a store without block accounting answers to statfs: nothing used, nothing free (a
 * read-only store; `df` shows 0), names up to 255 bytes.
 */
export function emptyStatfs(): StatFs {
  return {
    bsize: 4096,
    frsize: 4096,
    blocks: 0,
    bfree: 0,
    bavail: 0,
    files: 0,
    ffree: 0,
    favail: 0,
    namemax: 255,
  };
}

/** Per-call context: an abort signal that fires when the operation's deadline passes. */
export interface OpContext {
  signal: AbortSignal;
}

export interface VirtualFs {
  /** LOOKUP + GETATTR of `path` ('/'-rooted, no trailing slash except the root). */
  getattr(path: string, ctx: OpContext): Promise<Attr>;
  readdir(path: string, ctx: OpContext): Promise<DirEntry[]>;
  readlink(path: string, ctx: OpContext): Promise<string>;
  /** Open a regular file read-only. `flags` are the open(2) flags (write access -> EROFS). */
  open(path: string, flags: number, ctx: OpContext): Promise<OpenFile>;
  /** Value of one xattr, or undefined when the node has no such attribute (-> ENODATA). */
  getxattr(path: string, name: string, ctx: OpContext): Promise<Buffer | undefined>;
  listxattr(path: string, ctx: OpContext): Promise<string[]>;
  /** open(O_CREAT) of a name that LOOKUP said does not exist. Must throw (the ALS answers ENOENT). */
  create(path: string, mode: number, ctx: OpContext): Promise<OpenFile>;
  rmdir(path: string, ctx: OpContext): Promise<void>;
  statfs(path: string, ctx: OpContext): Promise<StatFs>;
  /**
   * Deadline for an operation on `path`, in ms. Lets the implementation give synthetic nodes a short
   * budget and nodes that need network resolution a longer one.
   */
  deadlineMs(op: FsOp, path: string): number;
}

export type FsOp =
  | 'getattr'
  | 'readdir'
  | 'readlink'
  | 'open'
  | 'read'
  | 'getxattr'
  | 'listxattr'
  | 'create'
  | 'rmdir'
  | 'statfs'
  | 'release'
  | 'access';
