import { describe, expect, it } from 'vitest';
import { parseAlsPath } from '../../src/store/als-path.js';
import { buildInfo, type LayerRecord } from '../../src/store/record.js';
import { errnoFor } from '../../src/fs/errno.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const D = `sha256:${'ab'.repeat(32)}`;
const errno = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return errnoFor(e);
  }
  return 'OK';
};

describe('ALS path parsing', () => {
  it('decodes base64 references (normalised) and digests', () => {
    // the example of als-client.md §2.1
    expect(b64('docker.io/library/alpine:latest')).toBe('ZG9ja2VyLmlvL2xpYnJhcnkvYWxwaW5lOmxhdGVzdA==');
    // the reference arrives parsed (an ImageRef), the digest checked
    const top = parseAlsPath('/ZG9ja2VyLmlvL2xpYnJhcnkvYWxwaW5lOmxhdGVzdA==');
    expect(top.kind).toBe('ref');
    expect(top.kind === 'ref' && top.ref).toMatchObject({
      registry: 'docker.io',
      repository: 'library/alpine',
    });
    expect(top.kind === 'ref' && top.ref.toString()).toBe('docker.io/library/alpine:latest');
    const layer = parseAlsPath(`/${b64('127.0.0.1:5000/a/b@' + D)}/${D}`);
    expect(layer).toMatchObject({ kind: 'layer', digest: D });
    expect(layer.kind === 'layer' && layer.ref.toString()).toBe(`127.0.0.1:5000/a/b@${D}`);
    // decoded once: the same name gives the same parsed reference object
    const again = parseAlsPath(`/${b64('127.0.0.1:5000/a/b@' + D)}`);
    expect(again.kind === 'ref' && layer.kind === 'layer' && again.ref === layer.ref).toBe(true);
    const R = b64('localhost:5000/x:1');
    expect(parseAlsPath(`/${R}/${D}/diff`)).toMatchObject({ kind: 'diff', sub: '' });
    expect(parseAlsPath(`/${R}/${D}/diff/usr/bin/sh`)).toMatchObject({ kind: 'diff', sub: 'usr/bin/sh' });
    expect(parseAlsPath(`/${R}/${D}/info`)).toMatchObject({ kind: 'info' });
    expect(parseAlsPath(`/${R}/${D}/use`)).toMatchObject({ kind: 'use' });
    expect(parseAlsPath(`/${R}/${D}/other`)).toEqual({ kind: 'absent', name: 'other' });
    expect(parseAlsPath('/')).toEqual({ kind: 'root' });
  });

  it('answers EINVAL for bad base64, references and digests', () => {
    expect(errno(() => parseAlsPath('/!!!'))).toBe('EINVAL');
    expect(errno(() => parseAlsPath('/' + b64('not a ref')))).toBe('EINVAL');
    expect(errno(() => parseAlsPath('/' + b64('a').replace(/=+$/, '')))).toBe('EINVAL');
    expect(errno(() => parseAlsPath(`/${b64('localhost:5000/x:1')}/xyz`))).toBe('EINVAL');
    expect(errno(() => parseAlsPath(`/${b64('localhost:5000/x:1')}/sha256:ABC`))).toBe('EINVAL');
    expect(errno(() => parseAlsPath(`/${b64('localhost:5000/x:1')}/${D}/info/x`))).toBe('ENOTDIR');
  });
});

describe('info JSON', () => {
  const rec: LayerRecord = {
    version: 1,
    ref: 'r',
    digest: D,
    matchedBy: 'blob',
    blobDigest: D,
    blobSize: 1234,
    mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
    compression: 'gzip',
    tocDigest: 'sha256:toc',
    tocAnnotation: 'containerd.io/snapshot/stargz/toc.digest',
    diffId: 'sha256:diff',
    diffSize: 5678,
    diffSizeSource: 'annotation',
    resolvedAt: '',
  };

  it('OLD form (blob digest): compressed-diff-digest, compressed-size, diff-digest, diff-size, compression', () => {
    expect(buildInfo(rec).toString()).toBe(
      `{"compressed-diff-digest":"${D}","compressed-size":1234,"diff-digest":"sha256:diff","diff-size":5678,"compression":2}\n`,
    );
  });

  it('NEW form (TOC digest): the exact stargz-store JSON, zstd = 4, no fields that would be persisted wrongly', () => {
    const s = buildInfo({ ...rec, matchedBy: 'toc', digest: 'sha256:toc', compression: 'zstd' }).toString();
    expect(s).toBe(
      '{"diff-size":-1,"compression":4,"toc-digest":"sha256:toc","flags":{"expected-layer-diffid":"sha256:diff"}}\n',
    );
    for (const k of ['names', 'uidmap', 'gidmap', 'diff-digest', 'compressed-diff-digest', 'metadata'])
      expect(s).not.toContain(`"${k}"`);
  });
});
