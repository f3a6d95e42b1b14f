import type { RegistryClient } from '../registry/index.js';
import type { StoreRegistry } from './deps.js';

/**
 * Present the registry client through the store's narrow StoreRegistry view. The reference and
 * digest arrive parsed (ImageRef, Digest from the ALS path): nothing is parsed again here.
 */
export function storeRegistryFrom(client: RegistryClient): StoreRegistry {
  return {
    async findLayer(ref, digest, signal, onManifest) {
      const f = await client.findLayer(ref, digest, onManifest ? { signal, onManifest } : { signal });
      // a config whose diff_ids do not line up with the layers cannot name any layer's DiffID
      const aligned = f.image.diffIDs.length === f.image.layers.length;
      return {
        manifestDigest: f.image.manifestDigest,
        configDigest: f.image.configDigest,
        descriptor: f.descriptor,
        matchedBy: f.matchedBy,
        diffId: aligned ? f.image.diffIDs[f.layerIndex] : undefined,
        layers: f.image.layers.map((descriptor, i) => ({
          descriptor,
          diffId: aligned ? f.image.diffIDs[i] : undefined,
        })),
      };
    },
    async openBlob(ref, digest, size, signal) {
      return await client.openBlob(ref, digest, { size, signal, skipProbe: true });
    },
  };
}
