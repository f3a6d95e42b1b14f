import { statfs } from 'node:fs/promises';
import {
  parseReference,
  tocAnnotation,
  uncompressedSizeAnnotation,
  type RegistryClient,
} from '../registry/index.js';
import type { Logger } from '../util/logger.js';
import type { LayerStore } from './layer-store.js';
import { PinManager, type PinImageInfo } from './pins.js';
import { rootLayout } from '../util/root-layout.js';

/** The store's PinManager: manifests from the registry client, layers through the layer store. */
export function createPinManager(o: {
  root: string;
  registry: RegistryClient;
  store: LayerStore;
  logger?: Logger;
}): PinManager {
  return new PinManager({
    root: o.root,
    resolveImage: async (ref, platform): Promise<PinImageInfo> => {
      const image = await o.registry.resolveImage(
        parseReference(ref),
        platform !== undefined ? { platform } : {},
      );
      return {
        layers: image.layers.map((l) => {
          const u = uncompressedSizeAnnotation(l);
          return {
            digest: l.digest,
            size: l.size,
            mediaType: l.mediaType,
            lazy: tocAnnotation(l) !== undefined,
            ...(u !== undefined ? { uncompressedSize: u } : {}),
          };
        }),
      };
    },
    holdLayer: (ref, digest) => o.store.holdLayer(ref, digest),
    freeBytes: async () => {
      const st = await statfs(rootLayout(o.root).cache);
      return st.bavail * st.bsize;
    },
    ...(o.logger ? { logger: o.logger } : {}),
  });
}
