import { Lru } from '../util/lru.js';

/**
 * Inode numbers. fuse-native carries only 32 bits, so instead of Go's `layerID << 32 | n` the space
 * is split in two halves, neither of which grows with the number of names ever looked up:
 * - [2, 2^31): one contiguous block per layer (`base + node.id`) from a counter. A blob's block is
 *   remembered (bounded LRU), so a layer re-opened after its idle handle was dropped keeps its
 *   numbers, which overlayfs and `find -samefile` rely on.
 * - [2^31, 2^32 - 1): synthetic nodes (ref and layer directories, info, blob), numbered by a hash
 *   of their name: no table at all. A collision only makes two such nodes share a number.
 */
const LAYER_SPACE_END = 0x8000_0000;
const SYNTHETIC_SPAN = 0x7fff_fffe;
/** Layers whose blocks are remembered after they were dropped. */
const MAX_REMEMBERED = 65_536;

export class InoAllocator {
  private next = 2; // 1 = mount root
  private readonly blocks = new Lru<string, { base: number; count: number }>({ maxEntries: MAX_REMEMBERED });

  /**
   * The block for `key` (a blob digest) of `count` numbers: returns the base (numbers are
   * base + 1 ... base + count). The same key and count give the same base while remembered.
   */
  layerBlock(key: string, count: number): number {
    const hit = this.blocks.get(key);
    if (hit && hit.count === count) return hit.base;
    if (this.next + count >= LAYER_SPACE_END) {
      // a process that opened ~2^31 nodes' worth of distinct layers: start over (collisions possible)
      this.next = 2;
    }
    const base = this.next - 1;
    this.next += count;
    this.blocks.set(key, { base, count });
    return base;
  }

  /** Layers whose blocks are remembered (memory bound; tests). */
  get rememberedLayers(): number {
    return this.blocks.size;
  }
}

/** Inode of a synthetic node, from its name (FNV-1a over the UTF-16 code units). */
export function syntheticIno(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return LAYER_SPACE_END + ((h >>> 0) % SYNTHETIC_SPAN);
}
