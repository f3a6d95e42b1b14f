import type { Digest } from '../util/digest.js';
import { TOC_ANNOTATIONS, type Descriptor, type ImageConfig, type ImageManifest } from './manifest.js';
import type { Platform } from './platform.js';
import type { ImageRef } from './reference.js';

/** What a resolved image is and how a layer name (blob or TOC digest) is found in it. */

export interface LayerDescriptor {
  digest: Digest;
  size: number;
  mediaType: string;
  annotations: Record<string, string>;
}

/** An image resolved for one platform. */
export interface ResolvedImage {
  ref: ImageRef;
  /** Digest of the platform manifest (not of the index). */
  manifestDigest: Digest;
  manifest: ImageManifest;
  /** The manifest bytes as served (what the digest covers). */
  manifestBytes: Buffer;
  config: ImageConfig;
  /** The config blob as served (verified against configDigest). */
  configBytes: Buffer;
  configDigest: Digest;
  platform: Platform;
  layers: LayerDescriptor[];
  diffIDs: string[];
  /** When the reference named an index: its digest and every manifest it lists (nested indexes flattened). */
  index?: { digest: Digest; mediaType: string; manifests: Descriptor[] };
}

/** How a name matched a layer: its blob digest (OLD c/storage) or a TOC digest annotation (NEW). */
export type LayerMatchKind = 'blob' | 'toc';

export interface FoundLayer {
  image: ResolvedImage;
  layerIndex: number;
  descriptor: LayerDescriptor;
  matchedBy: LayerMatchKind;
}

/** Match a layer by blob digest, else by a TOC annotation. */
export function matchLayer(
  layers: ReadonlyArray<Descriptor | LayerDescriptor>,
  digestOrToc: string,
): { layerIndex: number; descriptor: LayerDescriptor; matchedBy: LayerMatchKind } | undefined {
  const pick = (l: Descriptor | LayerDescriptor): LayerDescriptor => ({
    digest: l.digest,
    size: l.size,
    mediaType: l.mediaType,
    annotations: l.annotations,
  });
  const i = layers.findIndex((l) => l.digest === digestOrToc);
  if (i >= 0) return { layerIndex: i, descriptor: pick(layers[i]!), matchedBy: 'blob' };
  const j = layers.findIndex((l) => TOC_ANNOTATIONS.some((k) => l.annotations[k] === digestOrToc));
  if (j >= 0) return { layerIndex: j, descriptor: pick(layers[j]!), matchedBy: 'toc' };
  return undefined;
}
