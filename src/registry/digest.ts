import { createHash, webcrypto } from 'node:crypto';
import type { Digest } from '../util/digest.js';
import { StoreError, DigestMismatchError, type ErrorContext } from '../util/errors.js';

/** Below this, hashing inline is cheaper than a trip to the thread pool. */
const INLINE_LIMIT = 64 * 1024;

/** `algo:hex` of `data`, hashing large buffers off the main thread (crypto.subtle uses the pool). */
export async function digestOf(data: Buffer, algorithm: 'sha256' | 'sha512' = 'sha256'): Promise<Digest> {
  // lower-case hex of the algorithm's full length: a Digest by construction
  if (data.length <= INLINE_LIMIT)
    return `${algorithm}:${createHash(algorithm).update(data).digest('hex')}` as Digest;
  const name = algorithm === 'sha256' ? 'SHA-256' : 'SHA-512';
  const d = await webcrypto.subtle.digest(name, data);
  return `${algorithm}:${Buffer.from(d).toString('hex')}` as Digest;
}

/** Throw unless `data` hashes to `expected` (sha256 or sha512); the checked digest is returned. */
export async function verifyDigest(
  data: Buffer,
  expected: string,
  context: ErrorContext,
  what: 'blob' = 'blob',
): Promise<Digest> {
  const alg = expected.slice(0, expected.indexOf(':'));
  if (alg !== 'sha256' && alg !== 'sha512') {
    throw new StoreError('E_MANIFEST', `unsupported digest algorithm ${alg.slice(0, 20)}`, {
      ...context,
      digest: expected,
    });
  }
  const actual = await digestOf(data, alg);
  if (actual !== expected) throw new DigestMismatchError(what, expected, actual, context);
  return actual;
}
