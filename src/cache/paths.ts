import { join } from 'node:path';
import { rootLayout } from '../util/root-layout.js';

// The digest rules live in util/digest.ts; the cache names files by the hex of sha256 digests only.
export { digestHex, isSha256Digest } from '../util/digest.js';

/** Directory layout under `<root>/cache` (decided by util/root-layout.ts). */
export class CachePaths {
  readonly base: string;
  readonly chunks: string;
  readonly tmp: string;

  constructor(root: string) {
    const layout = rootLayout(root);
    this.base = layout.cache;
    this.chunks = layout.chunks;
    this.tmp = layout.cacheTmp;
  }

  chunkDir(hex: string): string {
    return join(this.chunks, hex.slice(0, 2));
  }

  chunkFile(hex: string): string {
    return join(this.chunks, hex.slice(0, 2), hex);
  }
}
