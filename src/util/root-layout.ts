import { join } from 'node:path';

/**
 * The one owner of the on-disk layout under `--root` (and of the default root and socket). Every module
 * that reads or writes state asks here; docs/architecture.md "State on disk" describes the same tree.
 * Imports nothing but node:path, so the helper binary and cache/ can use it.
 */

/** Go store default of `--root`. */
export const DEFAULT_ROOT = '/var/lib/stargz-store';
/** Go store default of `--addr`; like Go, it does not follow `--root`. */
export const DEFAULT_CONTROL_SOCKET = '/var/lib/stargz-store/store.sock';

export interface RootLayout {
  readonly root: string;
  /** Chunk cache base: `cache/`. */
  readonly cache: string;
  /** Verified chunks, content-addressed: `cache/chunks/sha256/ab/<hex>`. */
  readonly chunks: string;
  /** Temp files of chunk writes (same filesystem, for rename): `cache/tmp/`. */
  readonly cacheTmp: string;
  /** Resolution records per (ref, digest): `metadata/layers/`. */
  readonly metadataLayers: string;
  /** Verified TOC tails: `metadata/tocs/`. */
  readonly metadataTocs: string;
  /** Per-layer engine state (DiffID verified, uncompressed size): `layer-state/`. */
  readonly layerState: string;
  /** Compressed blob bytes kept until a layer is verified: `blobs/sha256/<hex>.partial|.coverage`. */
  readonly blobs: string;
  /** Pinned image sets: `pins.json`. */
  readonly pins: string;
  /** One store per root: `stargz-store.lock` (pid, checked against /proc). */
  readonly instanceLock: string;
  /** The throwaway store of the start-up rehearsal (store/rehearsal.ts): `rehearsal/`, removed after. */
  readonly rehearsal: string;
}

/** One store per control socket: `<socket>.lock` next to the socket (which need not be under root). */
export function socketLock(addr: string): string {
  return `${addr}.lock`;
}

export function rootLayout(root: string): RootLayout {
  const cache = join(root, 'cache');
  return {
    root,
    cache,
    chunks: join(cache, 'chunks', 'sha256'),
    cacheTmp: join(cache, 'tmp'),
    metadataLayers: join(root, 'metadata', 'layers'),
    metadataTocs: join(root, 'metadata', 'tocs'),
    layerState: join(root, 'layer-state'),
    blobs: join(root, 'blobs', 'sha256'),
    pins: join(root, 'pins.json'),
    instanceLock: join(root, 'stargz-store.lock'),
    rehearsal: join(root, 'rehearsal'),
  };
}
