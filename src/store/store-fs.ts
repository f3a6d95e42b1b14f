import { constants as fsc } from 'node:fs';
import { FsError } from '../fs/errno.js';
import { crashPoint } from '../util/crash-points.js';
import {
  emptyStatfs,
  ROOT_DIR_ATTR,
  S_IFDIR,
  S_IFREG,
  type Attr,
  type DirEntry,
  type FsOp,
  type OpenFile,
  type StatFs,
  type VirtualFs,
} from '../fs/vfs.js';
import type { TreeNode } from '../format/model.js';
import {
  FileReadAhead,
  ReadAheadBudget,
  chunkEndOf,
  DEFAULT_READ_AHEAD,
  type ReadAheadPolicy,
} from '../layer/read-ahead.js';
import { StoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { AccessLog } from './access-log.js';
import { parseAlsPath, type AlsLocation } from './als-path.js';
import type { LazyLayerLike } from './deps.js';
import type { ViewNode } from './diff-view.js';
import { syntheticIno } from './ino.js';
import { NotLazyError, type LayerResolver, type ResolvedLayer } from './resolver.js';
import type { ImageRef } from '../registry/reference.js';
import type { Digest } from '../util/digest.js';

export interface StoreDeadlines {
  /** Budget for a lookup that has to resolve a layer (diff/info/blob, paths inside diff). */
  lookupMs: number;
  /** Budget for one read of layer content. */
  readMs: number;
  /** Budget for nodes that need no I/O (root, ref and layer directories, use/rmdir). */
  syntheticMs: number;
  /**
   * Hard limit of any FUSE operation that may need I/O, after which the adapter answers EIO itself;
   * above lookupMs and readMs, so the store's own (more precise) answers come first.
   */
  fuseMs: number;
}

export interface RefCounter {
  use(ref: string, digest: string): void;
  release(ref: string, digest: string): void;
}

/** Read-ahead in flight across all open files of one layer (each file: the policy's own bound). */
const LAYER_READ_AHEAD_FACTOR = 2;

const O_ACCMODE = 3;
const notFound = (path: string, why = 'no such entry') => new StoreError('E_NOT_FOUND', why, { path });

/**
 * The ALS tree as a VirtualFs: `<base64(ref)>/<digest>/{diff/,info,blob}` plus the write-only `use`
 * notification and rmdir release. Directories above `diff` are synthesised without I/O.
 */
export class StoreFs implements VirtualFs {
  constructor(
    private readonly resolver: LayerResolver,
    private readonly refs: RefCounter,
    private readonly deadlines: StoreDeadlines,
    private readonly log: Logger,
    /** `[debug] record_accesses`: first opens/readlinks of diff nodes and the bytes read from them. */
    private readonly accesses?: AccessLog,
    /** Sequential read-ahead per open file (false: none). */
    readAhead: Partial<ReadAheadPolicy> | false = {},
  ) {
    this.readAhead = readAhead === false ? undefined : { ...DEFAULT_READ_AHEAD, ...readAhead };
  }

  private readonly readAhead: ReadAheadPolicy | undefined;
  /** One read-ahead budget per layer, shared by its open files; goes with the layer object. */
  private readonly budgets = new WeakMap<LazyLayerLike, ReadAheadBudget>();

  /** Read-ahead for one open file of `layer`, or undefined when the layer cannot load ahead. */
  private openReadAhead(layer: LazyLayerLike, node: TreeNode, path: string): FileReadAhead | undefined {
    const policy = this.readAhead;
    const prefetch = layer.prefetchRange?.bind(layer);
    if (policy === undefined || prefetch === undefined || node.size <= policy.triggerBytes) return undefined;
    let budget = this.budgets.get(layer);
    if (budget === undefined) {
      budget = new ReadAheadBudget(policy.maxInflightBytes * LAYER_READ_AHEAD_FACTOR);
      this.budgets.set(layer, budget);
    }
    return new FileReadAhead(
      node.size,
      (offset, length, signal, progress) => prefetch(node, offset, length, signal, progress),
      {
        policy,
        budget,
        chunkEnd: chunkEndOf(node.chunks),
        onError: (err) => this.log.debug({ err, path }, 'read-ahead step failed'),
      },
    );
  }

  private syntheticDir(key: string): Attr {
    // numbered by name: no table that grows with every name ever looked up
    const ino = syntheticIno(key);
    return { mode: S_IFDIR | 0o500, ino, uid: 0, gid: 0, size: 0, nlink: 2, rdev: 0, mtime: 0 };
  }

  /**
   * diff/info/blob LOOKUP: resolve within the lookup budget. Anything short of a servable layer is
   * ENOENT, which makes containers/storage fall back to a normal pull (als-client.md §2.4).
   */
  private async resolveForLookup(ref: ImageRef, digest: Digest): Promise<ResolvedLayer> {
    const hit = this.resolver.peek(ref, digest);
    if (hit) return hit;
    try {
      return await this.resolver.resolve(ref, digest, this.deadlines.lookupMs);
    } catch (err) {
      if (err instanceof NotLazyError) throw err;
      throw new StoreError('E_NOT_FOUND', `layer not available in time: ${(err as Error).message}`, {
        ref: ref.toString(),
        digest,
      });
    }
  }

  /**
   * Content inside `diff` of a layer a client already uses: failing to resolve is EIO, never ENOENT
   * (an ENOENT here would let overlayfs show the lower layers' files instead).
   */
  private async resolveForContent(ref: ImageRef, digest: Digest): Promise<ResolvedLayer> {
    const hit = this.resolver.peek(ref, digest);
    if (hit) return hit;
    try {
      return await this.resolver.resolve(ref, digest, this.deadlines.lookupMs);
    } catch (err) {
      throw new StoreError('E_LAYER_BAD', `layer cannot be served: ${(err as Error).message}`, {
        ref: ref.toString(),
        digest,
      });
    }
  }

  private async diffNode(
    loc: Extract<AlsLocation, { kind: 'diff' }>,
  ): Promise<{ r: ResolvedLayer; v: ViewNode }> {
    const r =
      loc.sub === ''
        ? await this.resolveForLookup(loc.ref, loc.digest)
        : await this.resolveForContent(loc.ref, loc.digest);
    return { r, v: r.handle.view.lookup(loc.sub) };
  }

  async getattr(path: string): Promise<Attr> {
    const loc = parseAlsPath(path);
    switch (loc.kind) {
      case 'root':
        return ROOT_DIR_ATTR;
      case 'ref':
        return this.syntheticDir(loc.ref.toString());
      case 'layer':
        return this.syntheticDir(`${loc.ref}\n${loc.digest}`);
      case 'info': {
        const r = await this.resolveForLookup(loc.ref, loc.digest);
        return fileAttr(r.infoIno, r.info.length);
      }
      case 'blob': {
        const r = await this.resolveForLookup(loc.ref, loc.digest);
        return fileAttr(r.blobIno, r.record.blobSize);
      }
      case 'diff': {
        const { r, v } = await this.diffNode(loc);
        return r.handle.view.attr(v);
      }
      case 'use':
        // must be absent: a positive entry would turn the client's O_CREAT into an open
        throw notFound(path, 'use is a write-only notification');
      case 'absent':
        throw notFound(path);
    }
  }

  async readdir(path: string): Promise<DirEntry[]> {
    const loc = parseAlsPath(path);
    switch (loc.kind) {
      case 'root':
      case 'ref':
        // never enumerated by clients; names are resolved on lookup only
        return [];
      case 'layer': {
        const r = this.resolver.peek(loc.ref, loc.digest);
        if (!r) return [];
        return [
          { name: 'blob', attr: fileAttr(r.blobIno, r.record.blobSize) },
          { name: 'diff', attr: r.handle.view.attr(r.handle.view.lookup('')) },
          { name: 'info', attr: fileAttr(r.infoIno, r.info.length) },
        ];
      }
      case 'diff': {
        const { r, v } = await this.diffNode(loc);
        return r.handle.view.readdir(v);
      }
      case 'info':
      case 'blob':
        throw new FsError('ENOTDIR', 'not a directory', { path });
      default:
        throw notFound(path);
    }
  }

  async readlink(path: string): Promise<string> {
    const loc = parseAlsPath(path);
    if (loc.kind !== 'diff') throw new FsError('EINVAL', 'not a symlink', { path });
    const { r, v } = await this.diffNode(loc);
    if (v.whiteout || v.node.type !== 'symlink') throw new FsError('EINVAL', 'not a symlink', { path });
    this.accesses?.readlinked({
      ref: loc.ref.toString(),
      digest: loc.digest,
      tocDigest: r.record.tocDigest,
      path: loc.sub,
      size: Buffer.byteLength(v.node.linkName),
    });
    return v.node.linkName;
  }

  async open(path: string, flags: number): Promise<OpenFile> {
    if ((flags & O_ACCMODE) !== fsc.O_RDONLY || (flags & fsc.O_TRUNC) !== 0) {
      throw new FsError('EROFS', 'read-only file system', { path });
    }
    const loc = parseAlsPath(path);
    switch (loc.kind) {
      case 'info': {
        const r = await this.resolveForLookup(loc.ref, loc.digest);
        const data = r.info;
        return {
          read: async (offset, length) =>
            data.subarray(Math.min(offset, data.length), Math.min(data.length, offset + length)),
        };
      }
      case 'blob': {
        const r = await this.resolveForContent(loc.ref, loc.digest);
        const blob = r.handle.blob;
        return {
          read: async (offset, length, signal) => {
            const end = Math.min(blob.size, offset + length);
            if (offset >= end) return Buffer.alloc(0);
            return await blob.read(offset, end - offset, signal);
          },
          // an open file keeps its layer open (idle layers are closed)
          release: r.handle.pin(),
        };
      }
      case 'diff': {
        const { r, v } = await this.diffNode(loc);
        if (v.whiteout || v.node.type !== 'reg') {
          throw new FsError(
            v.node.type === 'dir' && !v.whiteout ? 'EISDIR' : 'EINVAL',
            'not a regular file',
            { path },
          );
        }
        const node = v.node;
        const layer = r.handle.layer;
        const unpin = r.handle.pin();
        const tracker = this.accesses?.opened({
          ref: loc.ref.toString(),
          digest: loc.digest,
          tocDigest: r.record.tocDigest,
          path: loc.sub,
          size: node.size,
        });
        const ahead = this.openReadAhead(layer, node, path);
        return {
          read: async (offset, length, signal, transient) => {
            const end = Math.min(node.size, offset + length);
            if (offset >= end) return Buffer.alloc(0);
            // before our own read: the steps ahead start while this one waits for its chunk
            ahead?.onRead(offset, end - offset);
            const data = await layer.read(node, offset, end - offset, {
              signal,
              transient: transient === true,
            });
            crashPoint('fuse-read');
            // only bytes actually served count (an aborted read throws above)
            tracker?.read(offset, data.length);
            return data;
          },
          release: () => {
            ahead?.close();
            unpin();
            tracker?.release();
          },
        };
      }
      case 'root':
      case 'ref':
      case 'layer':
        throw new FsError('EISDIR', 'is a directory', { path });
      default:
        throw notFound(path);
    }
  }

  async getxattr(path: string, name: string): Promise<Buffer | undefined> {
    const loc = parseAlsPath(path);
    if (loc.kind !== 'diff') return undefined;
    const { r, v } = await this.diffNode(loc);
    return r.handle.view.getxattr(v, name);
  }

  async listxattr(path: string): Promise<string[]> {
    const loc = parseAlsPath(path);
    if (loc.kind !== 'diff') return [];
    const { r, v } = await this.diffNode(loc);
    return r.handle.view.listxattr(v);
  }

  async create(path: string): Promise<OpenFile> {
    const loc = parseAlsPath(path);
    if (loc.kind === 'use') {
      this.refs.use(loc.ref.toString(), loc.digest);
      // ENOENT is the "notification received" answer containers/storage expects
      throw notFound(path, 'use notification recorded');
    }
    if (loc.kind === 'absent') throw notFound(path);
    throw new FsError('EROFS', 'read-only file system', { path });
  }

  async rmdir(path: string): Promise<void> {
    const loc = parseAlsPath(path);
    if (loc.kind === 'layer') {
      this.refs.release(loc.ref.toString(), loc.digest);
      // ENOENT = released (also for layers we never saw: anything else makes the client warn)
      throw notFound(path, 'release recorded');
    }
    throw new FsError('EROFS', 'read-only file system', { path });
  }

  async statfs(): Promise<StatFs> {
    return emptyStatfs();
  }

  deadlineMs(op: FsOp, path: string): number {
    // Depth 0-2 (root, ref dir, layer dir) needs no I/O; use/rmdir only count. Everything else gets
    // the hard FUSE limit: the store answers itself at lookupMs (ENOENT) or readMs (the layer's
    // E_DEADLINE, EIO) before the adapter's own EIO.
    let depth = 0;
    for (let i = 1; i < path.length && depth < 3; i++) if (path.charCodeAt(i) === 47) depth++;
    if (depth < 2 || op === 'rmdir' || op === 'create') return this.deadlines.syntheticMs;
    return this.deadlines.fuseMs;
  }
}

function fileAttr(ino: number, size: number): Attr {
  return { mode: S_IFREG | 0o400, ino, uid: 0, gid: 0, size, nlink: 1, rdev: 0, mtime: 0 };
}
