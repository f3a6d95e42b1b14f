import { StoreError, type ErrorContext } from './errors.js';
import { ownString } from './own-string.js';

/**
 * THE digest rules of the store, and the `Digest` type that says "already checked": a string that
 * passed `parseDigest` (or `isValidDigest`) once, at the edge, and is passed on as a value from
 * there. OCI image-spec grammar (`algorithm ":" encoded`), with the registered algorithms held to
 * their exact form: sha256 = 64 lower-case hex digits, sha512 = 128.
 */
export type Digest = string & { readonly __digest: true };

// algorithm-component (separator component)* ":" encoded; at least 32 encoded characters (the
// distribution reference grammar), so a truncated hex never passes as an unknown algorithm's digest
const GRAMMAR = /^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$/;
const REGISTERED: Record<string, RegExp> = {
  sha256: /^[a-f0-9]{64}$/,
  sha512: /^[a-f0-9]{128}$/,
};
/** The only digests that may become file names (chunk cache, blob store): sha256 exactly. */
const SHA256 = /^sha256:([0-9a-f]{64})$/;

/** True when `s` is a digest by the store's one rule. */
export function isValidDigest(s: string): s is Digest {
  if (!GRAMMAR.test(s)) return false;
  const colon = s.indexOf(':');
  const exact = REGISTERED[s.slice(0, colon)];
  return exact === undefined || exact.test(s.slice(colon + 1));
}

/** `s` as a Digest, or E_INVALID_ARGUMENT naming `what` (one line, input cut to 80 characters). */
export function parseDigest(s: string, what = 'digest', context: ErrorContext = {}): Digest {
  if (typeof s === 'string' && isValidDigest(s)) return s;
  throw new StoreError('E_INVALID_ARGUMENT', `${what} is not a valid digest (algorithm:hex)`, {
    ...context,
    digest: String(s).slice(0, 80),
  });
}

/** `sha256:<64 lower-case hex>`: a digest the local stores can address. */
export function isSha256Digest(s: string): s is Digest {
  return SHA256.test(s);
}

/** Hex part of a `sha256:<hex>` digest, or a typed error: a TOC-supplied digest must not become a path. */
export function digestHex(digest: string): string {
  const m = SHA256.exec(digest);
  if (m === null) {
    throw new StoreError('E_INVALID_ARGUMENT', 'chunk digest is not sha256:<64 lower-case hex>', {
      digest: digest.slice(0, 80),
    });
  }
  // a flat copy, not a view of the digest: the hex is kept as a key of the cache's indexes
  return ownString(m[1]!);
}
