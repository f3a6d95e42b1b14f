import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthFileProvider, defaultAuthFilePaths } from '../../src/registry/auth-files.js';
import { parseWwwAuthenticate } from '../../src/registry/challenge.js';
import {
  CredentialChain,
  MemoryCredentialProvider,
  type CredentialProvider,
} from '../../src/registry/credentials.js';
import { parseManifestDocument, tocOffsetHint } from '../../src/registry/manifest.js';
import { normalizePlatform, parsePlatform, platformMatches } from '../../src/registry/platform.js';
import { backoffMs, isRetryableStatus, parseRetryAfter, retryPolicy } from '../../src/registry/retry.js';
import { isStoreError } from '../../src/util/errors.js';

describe('WWW-Authenticate', () => {
  it('parses Docker Hub style bearer challenges', () => {
    expect(
      parseWwwAuthenticate(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull"',
      ),
    ).toEqual([
      {
        scheme: 'bearer',
        params: {
          realm: 'https://auth.docker.io/token',
          service: 'registry.docker.io',
          scope: 'repository:library/alpine:pull',
        },
      },
    ]);
  });
  it('parses several challenges, escapes and unquoted values', () => {
    expect(
      parseWwwAuthenticate([
        'Basic realm="a \\"b\\"", charset=UTF-8, Bearer realm=http://x/t , error="invalid_token"',
      ]),
    ).toEqual([
      { scheme: 'basic', params: { realm: 'a "b"', charset: 'UTF-8' } },
      { scheme: 'bearer', params: { realm: 'http://x/t', error: 'invalid_token' } },
    ]);
    expect(parseWwwAuthenticate(undefined)).toEqual([]);
    expect(parseWwwAuthenticate('=garbage')).toEqual([]);
  });
});

describe('retry policy', () => {
  const p = retryPolicy({});
  it('has the Go store defaults', () => {
    expect(p).toEqual({ maxRetries: 5, minWaitMs: 30, maxWaitMs: 300_000 });
  });
  it('backs off exponentially with jitter in [wait, 2*wait), capped', () => {
    expect(backoffMs(p, 0, undefined, () => 0)).toBe(30);
    expect(backoffMs(p, 3, undefined, () => 0)).toBe(240);
    expect(backoffMs(p, 3, undefined, () => 0.999)).toBeCloseTo(479.76);
    expect(backoffMs(p, 30, undefined, () => 0)).toBe(300_000);
    expect(backoffMs(p, 0, 5000, () => 0)).toBe(5000);
  });
  it('parses Retry-After seconds and dates', () => {
    expect(parseRetryAfter('7')).toBe(7000);
    expect(parseRetryAfter(new Date(1_000_000 + 4000).toUTCString(), 1_000_000)).toBe(4000);
    expect(parseRetryAfter('soon')).toBeUndefined();
  });
  it('retries 429 and 5xx but not 501 or 4xx', () => {
    expect([429, 500, 502, 503, 504, 599].every(isRetryableStatus)).toBe(true);
    expect([400, 401, 403, 404, 416, 501].some(isRetryableStatus)).toBe(false);
  });
});

describe('platforms', () => {
  it('normalises like containerd', () => {
    expect(normalizePlatform({ os: 'Linux', architecture: 'x86_64' })).toEqual({
      os: 'linux',
      architecture: 'amd64',
    });
    expect(normalizePlatform({ os: 'linux', architecture: 'aarch64', variant: 'v8' })).toEqual({
      os: 'linux',
      architecture: 'arm64',
    });
    expect(normalizePlatform({ os: 'linux', architecture: 'armhf' })).toEqual({
      os: 'linux',
      architecture: 'arm',
      variant: 'v7',
    });
    expect(parsePlatform('linux/arm')).toEqual({ os: 'linux', architecture: 'arm', variant: 'v7' });
    expect(() => parsePlatform('linux')).toThrow();
  });
  it('matches compatible variants only', () => {
    const arm7 = parsePlatform('linux/arm/v7');
    expect(platformMatches(arm7, { os: 'linux', architecture: 'arm', variant: 'v6' })).toBe(true);
    expect(
      platformMatches(parsePlatform('linux/arm/v6'), { os: 'linux', architecture: 'arm', variant: 'v7' }),
    ).toBe(false);
    expect(
      platformMatches(parsePlatform('linux/arm64'), { os: 'linux', architecture: 'arm64', variant: 'v8' }),
    ).toBe(true);
    expect(platformMatches(parsePlatform('linux/amd64'), { os: 'windows', architecture: 'amd64' })).toBe(
      false,
    );
    expect(platformMatches(parsePlatform('linux/amd64'), undefined)).toBe(true);
  });
});

describe('manifest documents', () => {
  const layer = {
    mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd',
    digest: 'sha256:' + '1'.repeat(64),
    size: 10,
  };
  const config = {
    mediaType: 'application/vnd.oci.image.config.v1+json',
    digest: 'sha256:' + '2'.repeat(64),
    size: 5,
  };
  it('tells manifests from indexes without a mediaType field', () => {
    const m = parseManifestDocument(
      Buffer.from(JSON.stringify({ schemaVersion: 2, config, layers: [layer] })),
    );
    expect(m.kind).toBe('manifest');
    const i = parseManifestDocument(Buffer.from(JSON.stringify({ schemaVersion: 2, manifests: [] })));
    expect(i.kind).toBe('index');
  });
  it('rejects schema1, bad descriptors and non-JSON with E_MANIFEST', () => {
    for (const body of [
      { schemaVersion: 1, name: 'x' },
      { schemaVersion: 2, config, layers: [{ ...layer, digest: 'sha256:xyz' }] },
      { schemaVersion: 2, config, layers: [{ ...layer, size: -1 }] },
      { schemaVersion: 2, mediaType: 'text/plain', config, layers: [] },
      'not json',
    ]) {
      let err: unknown;
      try {
        parseManifestDocument(Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)));
      } catch (e) {
        err = e;
      }
      expect(isStoreError(err, 'E_MANIFEST')).toBe(true);
    }
  });
  it('reads the TOC offset hint from manifest-position', () => {
    expect(
      tocOffsetHint({
        ...layer,
        annotations: { 'io.containers.zstd-chunked.manifest-position': '1547596:7551:31350:1' },
      }),
    ).toBe(1547596);
    expect(
      tocOffsetHint({ ...layer, annotations: { 'io.containers.zstd-chunked.manifest-position': '1:2:3' } }),
    ).toBeUndefined();
  });
});

describe('credential providers', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sgz-creds-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const q = (host: string, repository: string, isUpstream = true, ref = `${host}/${repository}:latest`) => ({
    host,
    repository,
    ref,
    isUpstream,
  });

  it('memory provider: per reference, upstream only, identity token wins', async () => {
    const m = new MemoryCredentialProvider();
    expect(
      m.addCredentialsJson(
        JSON.stringify({
          'quay.io/org/a:1': { username: 'u', password: 'p' },
          'alpine:latest': { identityToken: 'tok', username: 'x', password: 'y' },
          'docker.io/library/busybox:latest': {},
        }),
      ),
    ).toBe(3);
    expect(await m.get(q('quay.io', 'org/a', true, 'quay.io/org/a:1'))).toEqual({
      username: 'u',
      password: 'p',
    });
    expect(await m.get(q('quay.io', 'org/a', false, 'quay.io/org/a:1'))).toBeUndefined();
    expect(await m.get(q('docker.io', 'library/alpine', true, 'docker.io/library/alpine:latest'))).toEqual({
      identityToken: 'tok',
    });
    // same repository, another tag: still that repository's credentials
    expect(await m.get(q('quay.io', 'org/a', true, 'quay.io/org/a:2'))).toEqual({
      username: 'u',
      password: 'p',
    });
    expect(await m.get(q('quay.io', 'org/b'))).toBeUndefined();
    expect(await m.get(q('docker.io', 'library/busybox'))).toBeUndefined();
    for (const bad of ['[]', '{"x y":{}}', '{"a":{"username":5}}', '{"a":"s"}', 'nope']) {
      let err: unknown;
      try {
        m.addCredentialsJson(bad);
      } catch (e) {
        err = e;
      }
      expect(isStoreError(err, 'E_INVALID_ARGUMENT')).toBe(true);
    }
  });

  it('auth files: longest key match, docker.io aliases, identity tokens, file order', async () => {
    const a = join(dir, 'auth.json');
    const b = join(dir, 'config.json');
    const basic = (s: string) => Buffer.from(s).toString('base64');
    await writeFile(
      a,
      JSON.stringify({
        auths: {
          'reg.lan': { auth: basic('host:wide') },
          'reg.lan/team/app': { auth: basic('repo:only:colon') },
        },
      }),
    );
    await writeFile(
      b,
      JSON.stringify({
        auths: {
          'https://index.docker.io/v1/': { auth: basic('hub:pw') },
          'other.lan': { identitytoken: 'idt' },
        },
      }),
    );
    const p = new AuthFileProvider({ paths: [join(dir, 'missing.json'), a, b] });
    expect(await p.get(q('reg.lan', 'team/app'))).toEqual({ username: 'repo', password: 'only:colon' });
    expect(await p.get(q('reg.lan', 'team/other'))).toEqual({ username: 'host', password: 'wide' });
    expect(await p.get(q('docker.io', 'library/alpine'))).toEqual({ username: 'hub', password: 'pw' });
    expect(await p.get(q('other.lan', 'x'))).toEqual({ identityToken: 'idt' });
    expect(await p.get(q('nobody.lan', 'x'))).toBeUndefined();
  });

  it('credsStore helpers: found, not found, failing, missing binary', async () => {
    const bin = join(dir, 'bin');
    await rm(bin, { recursive: true, force: true });
    await mkdir(bin);
    await writeFile(
      join(bin, 'docker-credential-store1'),
      '#!/bin/sh\nread s\nif [ "$s" = "https://index.docker.io/v1/" ]; then echo \'{"Username":"<token>","Secret":"hub-refresh"}\'; exit 0; fi\n' +
        'if [ "$s" = "crash.lan" ]; then echo "secret-leak-xyz" ; exit 3; fi\necho "credentials not found in native keychain"; exit 1\n',
    );
    await chmod(join(bin, 'docker-credential-store1'), 0o755);
    const cfg = join(dir, 'store.json');
    await writeFile(cfg, JSON.stringify({ credsStore: 'store1' }));
    const p = new AuthFileProvider({ paths: [cfg], helperDir: bin });
    expect(await p.get(q('docker.io', 'library/alpine'))).toEqual({ identityToken: 'hub-refresh' });
    expect(await p.get(q('reg.lan', 'x'))).toBeUndefined();
    const err = await p.get(q('crash.lan', 'x')).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
    expect(String((err as Error).message)).not.toContain('secret-leak-xyz');
    await writeFile(cfg, JSON.stringify({ credsStore: 'absent' }));
    const p2 = new AuthFileProvider({ paths: [cfg], helperDir: bin, reloadAfterMs: 0 });
    expect(isStoreError(await p2.get(q('reg.lan', 'x')).catch((e: unknown) => e), 'E_CONFIG')).toBe(true);
  });

  it('chain: first provider with a secret wins; failures are skipped', async () => {
    const failing: CredentialProvider = { name: 'bad', get: () => Promise.reject(new Error('boom')) };
    const m = new MemoryCredentialProvider();
    m.addCredentials({ 'reg.lan/a:1': { username: 'u', password: 'p' } });
    const chain = new CredentialChain([failing, m]);
    expect(await chain.get(q('reg.lan', 'a', true, 'reg.lan/a:1'))).toEqual({ username: 'u', password: 'p' });
  });

  it('default auth file order follows containers/image, then docker', () => {
    expect(
      defaultAuthFilePaths({
        REGISTRY_AUTH_FILE: '/x/auth.json',
        HOME: '/home/u',
        XDG_RUNTIME_DIR: '/run/user/7',
      }),
    ).toEqual([
      '/x/auth.json',
      '/run/user/7/containers/auth.json',
      '/home/u/.config/containers/auth.json',
      '/etc/containers/auth.json',
      '/home/u/.docker/config.json',
      '/home/u/.dockercfg',
    ]);
    expect(defaultAuthFilePaths({ HOME: '/root' })[0]).toMatch(/^\/run\/containers\/\d+\/auth\.json$/);
  });
});
