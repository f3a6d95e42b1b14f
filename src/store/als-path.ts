import { decodeAlsRefName, isValidDigest, parseReference } from '../registry/reference.js';
import { StoreError } from '../util/errors.js';
import { FsError } from '../fs/errno.js';

/**
 * Where a FUSE path points in the ALS tree `<mnt>/<base64(ref)>/<digest>/{diff/,info,blob,use}`.
 * Parsing is pure (no I/O): bad base64, references and digests are EINVAL as in the Go store.
 */
export type AlsLocation =
  | { kind: 'root' }
  | { kind: 'ref'; ref: string }
  | { kind: 'layer'; ref: string; digest: string }
  | { kind: 'info' | 'blob' | 'use'; ref: string; digest: string }
  /** `sub` is the path inside the layer ('' = the diff root), without leading slash. */
  | { kind: 'diff'; ref: string; digest: string; sub: string }
  /** Any other name inside a layer directory. */
  | { kind: 'absent'; name: string };

const refNames = new Map<string, string | StoreError>();
const REF_CACHE_MAX = 4096;

/** Decode `<base64(ref)>` to the normalised reference string (memoised: every lookup goes through here). */
export function decodeRefName(name: string): string {
  const hit = refNames.get(name);
  if (hit !== undefined) {
    if (hit instanceof StoreError) throw hit;
    return hit;
  }
  let out: string | StoreError;
  try {
    const text = decodeAlsRefName(name);
    out = parseReference(text).toString();
  } catch (err) {
    out =
      err instanceof StoreError
        ? new StoreError('E_INVALID_ARGUMENT', err.message, { ...err.context, name: name.slice(0, 300) })
        : new StoreError('E_INVALID_ARGUMENT', 'not an ALS reference name', { name: name.slice(0, 300) });
  }
  if (refNames.size >= REF_CACHE_MAX) refNames.clear();
  refNames.set(name, out);
  if (out instanceof StoreError) throw out;
  return out;
}

export function checkDigest(name: string): string {
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
