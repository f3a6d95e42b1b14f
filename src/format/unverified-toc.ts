/**
 * A TOC that has been read and parsed but not yet matched against the digest the image names
 * (the Go store's VerifiableReader idea). It does not expose the tree: the only ways to get a
 * LayerIndex are verify(digest) -- the one TOC digest check on the resolution path -- and, for
 * tools inspecting a blob the user supplied without a digest, an explicit trustUnverified().
 */
import { DigestMismatchError } from '../util/errors.js';
import type { LayerFormat, LayerIndex } from './model.js';

export class UnverifiedToc {
  readonly #index: LayerIndex;

  constructor(index: LayerIndex) {
    this.#index = index;
  }

  get format(): LayerFormat {
    return this.#index.format;
  }
  /** The digests this TOC can be verified against (see LayerIndex). */
  get tocDigest(): string {
    return this.#index.tocDigest;
  }
  get tocJsonDigest(): string {
    return this.#index.tocJsonDigest;
  }
  get manifestChecksum(): string | undefined {
    return this.#index.manifestChecksum;
  }

  /** Does `digest` name this TOC (its TOC key, JSON digest or zstd:chunked manifest checksum)? */
  matches(digest: string): boolean {
    const i = this.#index;
    return digest === i.tocDigest || digest === i.tocJsonDigest || digest === i.manifestChecksum;
  }

  /** The index, once `expected` names this TOC; E_TOC_DIGEST_MISMATCH otherwise. */
  verify(expected: string): LayerIndex {
    if (!this.matches(expected)) {
      throw new DigestMismatchError('toc', expected, this.#index.tocDigest, {
        tocJsonDigest: this.#index.tocJsonDigest,
      });
    }
    return this.#index;
  }

  /**
   * The index without a digest check: only for a blob the user named directly (`layer inspect`
   * of a local file without --toc-digest). The store never calls this.
   */
  trustUnverified(): LayerIndex {
    return this.#index;
  }
}
