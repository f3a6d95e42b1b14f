import * as fsp from 'node:fs/promises';
import { openDirectForWrite, type PositionalWriter } from '../util/direct-write.js';

/**
 * Where the blob store may take disk space from. The chunk cache implements it
 * (`reserveExternal` / `releaseExternal`) so compressed and decompressed bytes share one
 * `max_bytes` / `min_free_bytes` bound.
 */
export interface DiskBudget {
  /** Ask for `bytes` more on disk; false: do not store them. */
  reserve(bytes: number): boolean | Promise<boolean>;
  /** Give back bytes reserved earlier (the blob was removed). */
  release(bytes: number): void;
}

/** The part of a FileHandle the store uses (tests inject failures through it). */
export interface BlobFileHandle extends PositionalWriter {
  read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  datasync(): Promise<void>;
  stat(): Promise<{ size: number }>;
  close(): Promise<void>;
}

/** The filesystem calls the store makes; node:fs/promises by default. */
export interface BlobFs {
  open(path: string, flags: string, mode?: number): Promise<BlobFileHandle>;
  /**
   * Open an existing file for O_DIRECT writes (util/direct-write.ts writeDirectAt); absent: the
   * store writes through the page cache only. Rejects with `E_NO_DIRECT` when the file system
   * refuses O_DIRECT.
   */
  openDirect?(path: string): Promise<BlobFileHandle>;
  readFile(path: string): Promise<Buffer>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
  mkdir(path: string, opts: { recursive: true; mode: number }): Promise<unknown>;
  readdir(path: string): Promise<string[]>;
}

/** node:fs/promises as a BlobFs. */
export const nodeFs: BlobFs = {
  open: (path, flags, mode) => fsp.open(path, flags, mode),
  openDirect: (path) => openDirectForWrite(path),
  readFile: (path) => fsp.readFile(path),
  rename: (from, to) => fsp.rename(from, to),
  unlink: (path) => fsp.unlink(path),
  mkdir: (path, opts) => fsp.mkdir(path, opts),
  readdir: (path) => fsp.readdir(path),
};

/** Overhead accounted per blob (the data file's and the record's metadata blocks). */
export const BLOB_OVERHEAD = 8192;
export const RECORD_VERSION = 1;

/** `<hex>.coverage`: the byte ranges known to be stored in `<hex>.partial`. */
export interface CoverageRecord {
  v: number;
  digest: string;
  size: number;
  intervals: Array<[number, number]>;
}

/** The chunk cache as the blob store's budget: both share `max_bytes` / `min_free_bytes`. */
export function chunkCacheBudget(cache: {
  reserveExternal(bytes: number): Promise<boolean>;
  releaseExternal(bytes: number): void;
}): DiskBudget {
  return { reserve: (n) => cache.reserveExternal(n), release: (n) => cache.releaseExternal(n) };
}
