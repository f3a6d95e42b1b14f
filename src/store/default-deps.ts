import type { BlobStore } from '../cache/blob-store.js';
import type { ChunkCache } from '../cache/chunk-cache.js';
import { readLayerToc } from '../format/open-layer.js';
import { LazyLayer, type LazyLayerOptions } from '../layer/lazy-layer.js';
import type { CreateLayerFn, LazyLayerLike, OpenLayerFn } from './deps.js';
import { LocalBlobBinding } from './local-blob-binding.js';

/** The real format reader (its result still has to be verified). */
export const defaultOpenLayer: OpenLayerFn = (reader, opts) => readLayerToc(reader, opts);

/** LazyLayer options the store lets its caller tune (prefetch, background fetch, deadlines ...). */
export type LayerTuning = Omit<
  LazyLayerOptions,
  'index' | 'source' | 'cache' | 'layerKey' | 'expectedDiffID' | 'logger'
>;

/**
 * LazyLayer over the shared chunk cache; the blob digest keys pins and persisted layer state. With
 * `blobs`, each layer keeps the compressed bytes it receives locally until it is fully verified, so
 * a restart resumes instead of fetching again (docs/architecture.md, "State on disk").
 */
export function lazyLayerFactory(
  cache: ChunkCache,
  tuning: LayerTuning = {},
  blobs?: BlobStore,
): CreateLayerFn {
  return (args) => {
    const opts: LazyLayerOptions = {
      ...tuning,
      index: args.index,
      source: args.blob,
      cache,
      layerKey: args.blobDigest,
      logger: args.logger,
    };
    if (args.diffId !== undefined) opts.expectedDiffID = args.diffId;
    if (blobs !== undefined) {
      opts.local = new LocalBlobBinding(blobs, args.blobDigest, args.index.blobSize, args.logger);
    }
    const layer = new LazyLayer(opts);
    const like: LazyLayerLike = {
      read: (node, offset, length, o) =>
        layer.read(node, offset, length, {
          ...(o.signal ? { signal: o.signal } : {}),
          ...(o.transient === true ? { transient: true } : {}),
        }),
      start: () => layer.start(),
      prefetchRange: (node, offset, length, signal, onProgress) =>
        layer.prefetchRange(node, offset, length, signal, onProgress),
      state: () => {
        const s = layer.state();
        const out: ReturnType<LazyLayerLike['state']> = {
          bytesFetched: s.bytesFetched,
          percent: s.percent,
          verified: s.fullyVerified,
        };
        if (s.lastError !== undefined) out.lastError = s.lastError;
        // the engine adds the DiffID stream length after its background pass; read it defensively
        const size = (s as { uncompressedSize?: unknown }).uncompressedSize;
        if (typeof size === 'number') out.uncompressedSize = size;
        return out;
      },
      close: () => layer.close(),
      pin: () => layer.pin(),
      unpin: () => layer.unpin(),
      whenBackgroundDone: () => layer.whenBackgroundDone(),
    };
    return like;
  };
}
