/**
 * The narrow views the store has of its collaborators (registry, format, layer engine). Keeping them
 * here lets the store be tested with fakes and keeps the real modules swappable; `default-deps.ts`
 * binds them to the real implementations.
 */
import type { LayerIndex, TreeNode } from '../format/model.js';
import type { ParseTurns } from '../format/toc.js';
import type { UnverifiedToc } from '../format/unverified-toc.js';
import type { FoundLayer, LayerDescriptor } from '../registry/layer-match.js';
import type { ImageRef } from '../registry/reference.js';
import type { Digest } from '../util/digest.js';
import type { RangeReader } from '../util/range-reader.js';
import type { Logger } from '../util/logger.js';

/**
 * A layer found in an image, flattened from the registry's FoundLayer: the manifest entry the
 * requested digest names, how it matched, and its DiffID.
 */
export interface LayerMatch {
  /** Digest of the platform manifest the layer is listed in. */
  manifestDigest: string;
  configDigest: string;
  descriptor: LayerDescriptor;
  /** 'blob': the name was the layer (blob) digest; 'toc': it was a TOC digest annotation. */
  matchedBy: FoundLayer['matchedBy'];
  /** config.rootfs.diff_ids[i]; undefined when the config has no entry for this layer. */
  diffId: string | undefined;
  /**
   * Every layer of the same platform manifest, base first (with its DiffID): lets the store resolve
   * the image's other layers before the client asks for them. Optional: a registry view may omit it.
   */
  layers?: ReadonlyArray<{ descriptor: LayerDescriptor; diffId: string | undefined }>;
}

/** What the store asks of the registry (src/registry RegistryClient, adapted in registry-adapter.ts). */
export interface StoreRegistry {
  /**
   * Find `digest` (blob or TOC digest) in any platform manifest of `ref`; E_NOT_FOUND when absent.
   * `onManifest` sees a manifest's layers as soon as it is known, before the image config is.
   */
  findLayer(
    ref: ImageRef,
    digest: Digest,
    signal: AbortSignal,
    onManifest?: (layers: readonly LayerDescriptor[]) => void,
  ): Promise<LayerMatch>;
  /** Random access to a blob of `ref`'s repository, by digest (never by tag). */
  openBlob(ref: ImageRef, digest: Digest, size: number, signal: AbortSignal): Promise<RangeReader>;
}

export interface OpenLayerOptions {
  /** Only to report "not the promised TOC" rather than a parse error; verification is the caller's. */
  expectedTocDigest?: string;
  tocOffsetHint?: number;
  /** Bytes of the blob's end the first read takes (see format/open-layer.ts). */
  tailGuessBytes?: number;
  signal?: AbortSignal;
  /** Whose turn it is to parse (store/parse-gate.ts). */
  turns?: ParseTurns;
}

/**
 * Read footer + TOC of a blob into the shared tree model (format/open-layer.ts readLayerToc). The
 * result is usable only through `verify(tocDigest)`: the resolver's one TOC digest check.
 */
export type OpenLayerFn = (reader: RangeReader, opts: OpenLayerOptions) => Promise<UnverifiedToc>;

export interface LazyLayerState {
  bytesFetched: number;
  /** 0..100 of the blob held locally. */
  percent: number;
  /** True once the whole layer was fetched and checked (DiffID). */
  verified: boolean;
  lastError?: string;
  /** Exact uncompressed tar size when known (after a full fetch). */
  uncompressedSize?: number;
}

/** A lazily fetched layer (layer/): verified reads of file content. */
export interface LazyLayerLike {
  /** `transient`: see ReadOptions.transient (layer/types.ts). */
  read(
    node: TreeNode,
    offset: number,
    length: number,
    opts: { signal?: AbortSignal; transient?: boolean },
  ): Promise<Buffer>;
  /** Start prefetch and background fetch. */
  start?(): void;
  /** Fetch + verify + cache the chunks of a file range, no bytes returned (sequential read-ahead). */
  prefetchRange?(
    node: TreeNode,
    offset: number,
    length: number,
    signal?: AbortSignal,
    onProgress?: (fraction: number) => void,
  ): Promise<void>;
  state(): LazyLayerState;
  close(): Promise<void> | void;
  /** Pinned image sets: keep every chunk out of eviction until unpin(). */
  pin?(): void;
  unpin?(): void;
  /** Resolves when the background pass (fetch + DiffID check) ended, either way. */
  whenBackgroundDone?(): Promise<void>;
}

export interface CreateLayerArgs {
  ref: string;
  blobDigest: string;
  diffId?: string;
  index: LayerIndex;
  blob: RangeReader;
  logger: Logger;
}

export type CreateLayerFn = (args: CreateLayerArgs) => LazyLayerLike;
