import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import {
  endpointUrl,
  isLoopbackHost,
  mergeHostsConfigs,
  resolveEndpoints,
} from '../../src/registry/hosts.js';
import { parseRegistriesConf } from '../../src/registry/registries-conf.js';
import { parseReference } from '../../src/registry/reference.js';
import { isStoreError } from '../../src/util/errors.js';
import { SHARED } from '../helpers/shared.js';

const urls = (ref: string, hosts: Parameters<typeof resolveEndpoints>[1]) =>
  resolveEndpoints(parseReference(ref), hosts).map((e) => endpointUrl(e, 'manifests/x'));

describe('endpoints for a reference', () => {
  it('docker.io goes to registry-1.docker.io over https', () => {
    expect(urls('alpine', {})).toEqual(['https://registry-1.docker.io/v2/library/alpine/manifests/x']);
  });

  it('loopback registries use plain http (MatchLocalhost); others https unless insecure', () => {
    expect(urls('127.0.0.1:5000/a', {})).toEqual(['http://127.0.0.1:5000/v2/a/manifests/x']);
    expect(urls('localhost/a', {})).toEqual(['http://localhost/v2/a/manifests/x']);
    expect(urls('[::1]:5000/a', {})).toEqual(['http://[::1]:5000/v2/a/manifests/x']);
    expect(urls('reg.example:5000/a', { 'reg.example:5000': { insecure: true } })).toEqual([
      'http://reg.example:5000/v2/a/manifests/x',
    ]);
    expect(urls('127.0.0.1:5000/a', { '127.0.0.1:5000': { caFiles: ['/x.pem'] } })).toEqual([
      'https://127.0.0.1:5000/v2/a/manifests/x',
    ]);
    expect(isLoopbackHost('127.3.2.1:1')).toBe(true);
    expect(isLoopbackHost('128.0.0.1')).toBe(false);
  });

  it('tries mirrors in order with ?ns=, then the registry', () => {
    const eps = resolveEndpoints(parseReference('docker.io/library/alpine:3'), {
      'docker.io': { mirrors: [{ host: 'mirror-a.local:5000', insecure: true }, { host: 'mirror-b.local' }] },
    });
    expect(eps.map((e) => endpointUrl(e, 'blobs/sha256:00'))).toEqual([
      'http://mirror-a.local:5000/v2/library/alpine/blobs/sha256:00?ns=docker.io',
      'https://mirror-b.local/v2/library/alpine/blobs/sha256:00?ns=docker.io',
      'https://registry-1.docker.io/v2/library/alpine/blobs/sha256:00',
    ]);
    expect(eps.map((e) => e.isUpstream)).toEqual([false, false, true]);
  });

  it('rewrites registries.conf prefixes and locations, honours blocked and pull-from-mirror', () => {
    const hosts = parseRegistriesConf(`
unqualified-search-registries = ["docker.io"]
[[registry]]
prefix = "example.com/foo"
location = "internal.example.com/bar"
[[registry.mirror]]
location = "mirror.example.com/cache"
pull-from-mirror = "digest-only"

[[registry]]
location = "blocked.example.com"
blocked = true

[[registry]]
location = "docker.io"
insecure = false
[[registry.mirror]]
location = "localhost:5001/hub"
`);
    expect(urls('example.com/foo/app:1', hosts)).toEqual([
      'https://internal.example.com/v2/bar/app/manifests/x',
    ]);
    const d = 'sha256:' + '0'.repeat(64);
    expect(urls(`example.com/foo/app@${d}`, hosts)).toEqual([
      'https://mirror.example.com/v2/cache/app/manifests/x?ns=example.com',
      'https://internal.example.com/v2/bar/app/manifests/x',
    ]);
    // other namespaces of the host are untouched
    expect(urls('example.com/other/app', hosts)).toEqual(['https://example.com/v2/other/app/manifests/x']);
    expect(urls('nginx', hosts)).toEqual([
      'http://localhost:5001/v2/hub/library/nginx/manifests/x?ns=docker.io',
      'https://registry-1.docker.io/v2/library/nginx/manifests/x',
    ]);
    let err: unknown;
    try {
      resolveEndpoints(parseReference('blocked.example.com/x'), hosts);
    } catch (e) {
      err = e;
    }
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
  });

  it('registries.conf insecure means TLS without verification, then HTTP', () => {
    const hosts = parseRegistriesConf('[[registry]]\nlocation = "reg.lan:5000"\ninsecure = true\n');
    const eps = resolveEndpoints(parseReference('reg.lan:5000/a'), hosts);
    expect(eps.map((e) => [e.scheme, e.skipVerify])).toEqual([
      ['https', true],
      ['http', false],
    ]);
    const v1 = parseRegistriesConf(
      '[registries.insecure]\nregistries = ["old.lan"]\n[registries.block]\nregistries = ["bad.lan"]\n',
    );
    expect(v1['old.lan']).toEqual({ tlsFallback: true });
    expect(v1['bad.lan']).toEqual({ blocked: true });
  });

  it('reads the lab registries.conf without error', async () => {
    const text = await readFile(`${SHARED}/lab/containers/registries.conf`, 'utf8');
    const hosts = parseRegistriesConf(text);
    expect(urls('127.0.0.1:5000/lab/tiny:estargz', hosts)).toEqual([
      'http://127.0.0.1:5000/v2/lab/tiny/manifests/x',
    ]);
  });

  it('merges configs: mirrors of both, later scalars win', () => {
    const m = mergeHostsConfigs(
      { 'docker.io': { mirrors: [{ host: 'a' }], requestTimeoutMs: 1 } },
      { 'index.docker.io': { mirrors: [{ host: 'b' }, { host: 'a' }], requestTimeoutMs: 2 } },
    );
    expect(m['docker.io']!.mirrors!.map((x) => x.host)).toEqual(['a', 'b']);
    expect(m['docker.io']!.requestTimeoutMs).toBe(2);
  });
});
