import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeAlsRefName, encodeAlsRefName, parseReference } from '../../src/registry/reference.js';
import { isStoreError } from '../../src/util/errors.js';

const D = 'sha256:' + 'ab'.repeat(32);

describe('parseReference', () => {
  it.each([
    ['alpine', 'docker.io', 'library/alpine', 'latest', undefined],
    ['alpine:3.19', 'docker.io', 'library/alpine', '3.19', undefined],
    ['library/alpine', 'docker.io', 'library/alpine', 'latest', undefined],
    ['user/app:v1', 'docker.io', 'user/app', 'v1', undefined],
    ['docker.io/alpine', 'docker.io', 'library/alpine', 'latest', undefined],
    ['index.docker.io/library/alpine:edge', 'docker.io', 'library/alpine', 'edge', undefined],
    ['registry-1.docker.io/foo/bar', 'docker.io', 'foo/bar', 'latest', undefined],
    ['localhost/app', 'localhost', 'app', 'latest', undefined],
    ['localhost:5000/a/b/c:t', 'localhost:5000', 'a/b/c', 't', undefined],
    ['127.0.0.1:5000/lab/tiny:estargz', '127.0.0.1:5000', 'lab/tiny', 'estargz', undefined],
    ['[::1]:5000/app:1', '[::1]:5000', 'app', '1', undefined],
    ['[fe80::1%eth0]:443/x', '[fe80::1%eth0]:443', 'x', 'latest', undefined],
    ['Quay.IO/org/img', 'Quay.IO', 'org/img', 'latest', undefined],
    ['UPPER/case', 'UPPER', 'case', 'latest', undefined],
    [`ghcr.io/o/i@${D}`, 'ghcr.io', 'o/i', undefined, D],
    [`ghcr.io/o/i:t@${D}`, 'ghcr.io', 'o/i', 't', D],
    [`alpine@${D}`, 'docker.io', 'library/alpine', undefined, D],
    ['a.b/c__d/e-f/g.h:x', 'a.b', 'c__d/e-f/g.h', 'x', undefined],
  ])('%s', (input, registry, repository, tag, digest) => {
    const r = parseReference(input);
    expect({ registry: r.registry, repository: r.repository, tag: r.tag, digest: r.digest }).toEqual({
      registry,
      repository,
      tag,
      digest,
    });
    // the normal form parses to itself
    expect(parseReference(r.toString()).toString()).toBe(r.toString());
  });

  it('prints the canonical full form', () => {
    expect(parseReference('alpine').toString()).toBe('docker.io/library/alpine:latest');
    expect(parseReference(`x.io/a@${D}`).toString()).toBe(`x.io/a@${D}`);
  });

  it.each([
    '',
    'docker.io/Library/alpine',
    'a//b',
    'a/b/',
    '/a',
    'a:',
    'a:-bad',
    'a@sha256:abc',
    `a@sha256:${'AB'.repeat(32)}`,
    'a@md5',
    'host:port:x/a',
    'a b',
    `x.io/${'a'.repeat(260)}`,
    'a:' + 't'.repeat(129),
    'ex ample.com/a',
  ])('rejects %j with E_BAD_REFERENCE', (input) => {
    let err: unknown;
    try {
      parseReference(input);
    } catch (e) {
      err = e;
    }
    expect(isStoreError(err, 'E_BAD_REFERENCE')).toBe(true);
  });

  it('never throws anything but E_BAD_REFERENCE, and round-trips what it accepts', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (s) => {
        // only the first parse may throw: a failing round trip must not be caught as "rejected"
        let r: ReturnType<typeof parseReference>;
        try {
          r = parseReference(s);
        } catch (e) {
          expect(isStoreError(e, 'E_BAD_REFERENCE')).toBe(true);
          return;
        }
        expect(parseReference(r.toString()).toString()).toBe(r.toString());
      }),
      { numRuns: 2000 },
    );
  });
});

describe('ALS reference names', () => {
  it('decodes what containers/storage writes (standard base64 with padding)', () => {
    // independent encoding: base64 of the UTF-8 string, as Go's base64.StdEncoding does
    const ref = '127.0.0.1:5000/lab/tiny:estargz';
    expect(decodeAlsRefName('MTI3LjAuMC4xOjUwMDAvbGFiL3Rpbnk6ZXN0YXJneg==')).toBe(ref);
    expect(encodeAlsRefName(ref)).toBe('MTI3LjAuMC4xOjUwMDAvbGFiL3Rpbnk6ZXN0YXJneg==');
  });

  it.each([
    'MTI3LjAuMC4xOjUwMDAvbGFiL3Rpbnk6ZXN0YXJneg', // missing padding
    'MTI3LjAuMC4xOjUwMDAvbGFiL3Rpbnk6ZXN0YXJneg-_', // url alphabet
    'ZG9ja2VyLmlvL2xpYnJhcnkvYWxwaW5lOmxhdGVzdA=x',
    '.Trash',
    '',
    'Zm9=', // non-canonical trailing bits
    'AAAA', // NUL bytes
    '/w==', // not UTF-8
  ])('rejects %j with E_INVALID_ARGUMENT', (name) => {
    let err: unknown;
    try {
      decodeAlsRefName(name);
    } catch (e) {
      err = e;
    }
    expect(isStoreError(err, 'E_INVALID_ARGUMENT')).toBe(true);
  });

  it('round-trips any printable reference string through Buffer base64', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[a-z0-9./:@_-]{1,100}$/), (s) => {
        expect(decodeAlsRefName(Buffer.from(s).toString('base64'))).toBe(s);
      }),
    );
  });
});
