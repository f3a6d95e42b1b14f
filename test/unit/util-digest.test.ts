import { describe, expect, it } from 'vitest';
import { digestHex, isSha256Digest, isValidDigest, parseDigest } from '../../src/util/digest.js';
import { isStoreError } from '../../src/util/errors.js';

const HEX = 'ab'.repeat(32);

describe('the one digest rule', () => {
  it.each([
    [`sha256:${HEX}`, true],
    [`sha512:${'cd'.repeat(64)}`, true],
    [`multihash+base58:${'Q'.repeat(46)}`, true],
    [`sha256:${HEX.toUpperCase()}`, false],
    [`sha256:${HEX.slice(2)}`, false],
    [`sha512:${HEX}`, false],
    ['sha256:abc', false],
    [`SHA256:${HEX}`, false],
    [`:${HEX}`, false],
    ['', false],
  ])('%s -> %s', (s, ok) => {
    expect(isValidDigest(s)).toBe(ok);
  });

  it('parseDigest returns the same string or throws E_INVALID_ARGUMENT', () => {
    expect(parseDigest(`sha256:${HEX}`)).toBe(`sha256:${HEX}`);
    let err: unknown;
    try {
      parseDigest('sha256:nope', 'layer digest');
    } catch (e) {
      err = e;
    }
    expect(isStoreError(err, 'E_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toContain('layer digest');
  });

  it('only sha256 digests become file names', () => {
    expect(isSha256Digest(`sha256:${HEX}`)).toBe(true);
    expect(isSha256Digest(`sha512:${'cd'.repeat(64)}`)).toBe(false);
    expect(digestHex(`sha256:${HEX}`)).toBe(HEX);
    expect(() => digestHex('sha256:../../etc')).toThrow(/sha256/);
  });
});
