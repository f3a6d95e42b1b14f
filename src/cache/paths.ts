import { join } from 'node:path';
import { StoreError } from '../util/errors.js';
import { rootLayout } from '../util/root-layout.js';

/** Only this exact shape ever reaches the filesystem: a TOC-supplied digest must not become a path. */
const DIGEST_RE = /^sha256:([0-9a-f]{64})$/;

/** Hex part of a `sha256:<hex>` digest, or a typed error for anything else. */
export function digestHex(digest: string): string {
  const m = DIGEST_RE.exec(digest);
  if (m === null) {
    throw new StoreError('E_INVALID_ARGUMENT', 'chunk digest is not sha256:<64 lower-case hex>', {
      digest: digest.slice(0, 80),
    });
  }
  return m[1]!;
}

export function isValidDigest(digest: string): boolean {
  return DIGEST_RE.test(digest);
}

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
