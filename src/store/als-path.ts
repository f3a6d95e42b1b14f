import { decodeAlsRefName, parseReference, type ImageRef } from '../registry/reference.js';
import { isValidDigest, type Digest } from '../util/digest.js';
import { StoreError } from '../util/errors.js';
import { Lru } from '../util/lru.js';
import { FsError } from '../fs/errno.js';

/**
 * Where a FUSE path points in the ALS tree `<mnt>/<base64(ref)>/<digest>/{diff/,info,blob,use}`.
 * Parsing is pure (no I/O): bad base64, references and digests are EINVAL as in the Go store.
 * This is the edge where the store's identities are parsed: from here on the reference is an
 * ImageRef and the digest a Digest, passed as values down to the registry client.
 */
export type AlsLocation =
  | { kind: 'root' }
  | { kind: 'ref'; ref: ImageRef }
  | { kind: 'layer'; ref: ImageRef; digest: Digest }
  | { kind: 'info' | 'blob' | 'use'; ref: ImageRef; digest: Digest }
  /** `sub` is the path inside the layer ('' = the diff root), without leading slash. */
  | { kind: 'diff'; ref: ImageRef; digest: Digest; sub: string }
  /** Any other name inside a layer directory. */
  | { kind: 'absent'; name: string };

/** Every lookup goes through here: decoded names (and refusals) are remembered, bounded. */
const refNames = new Lru<string, ImageRef | StoreError>({ maxEntries: 4096 });

/** Decode `<base64(ref)>` to the normalised image reference (memoised). */
export function decodeRefName(name: string): ImageRef {
  let out = refNames.get(name);
  if (out === undefined) {
    try {
      out = parseReference(decodeAlsRefName(name));
    } catch (err) {
      out =
        err instanceof StoreError
          ? new StoreError('E_INVALID_ARGUMENT', err.message, { ...err.context, name: name.slice(0, 300) })
          : new StoreError('E_INVALID_ARGUMENT', 'not an ALS reference name', { name: name.slice(0, 300) });
    }
    refNames.set(name, out);
  }
  if (out instanceof StoreError) throw out;
  return out;
}

export function checkDigest(name: string): Digest {
  if (!isValidDigest(name)) {
    throw new StoreError('E_INVALID_ARGUMENT', 'not a valid digest', { digest: name.slice(0, 200) });
  }
  return name;
}

export function parseAlsPath(path: string): AlsLocation {
  if (path === '/' || path === '') return { kind: 'root' };
  const parts = path.split('/');
  // path starts with '/', so parts[0] === ''
  const [, refName, digestName, name, ...rest] = parts;
  const ref = decodeRefName(refName!);
  if (digestName === undefined) return { kind: 'ref', ref };
  const digest = checkDigest(digestName);
  if (name === undefined) return { kind: 'layer', ref, digest };
  if (name === 'diff') return { kind: 'diff', ref, digest, sub: rest.join('/') };
  if (name === 'info' || name === 'blob' || name === 'use') {
    if (rest.length > 0) throw new FsError('ENOTDIR', `${name} is not a directory`, { path });
    return { kind: name, ref, digest };
  }
  if (rest.length > 0) throw new StoreError('E_NOT_FOUND', 'no such entry', { path });
  return { kind: 'absent', name };
}
