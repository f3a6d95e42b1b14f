import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MemoryCredentialProvider, RegistryClient, parseReference } from '../../src/registry/index.js';
import { captureLogger, errorText } from '../helpers/registry-log-capture.js';
import { expectNoSecrets } from '../helpers/secrets.js';
import { pushImage, type PushedImage } from '../helpers/push.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { startTokenServer, type TokenServer } from '../helpers/token-server.js';

const USER = 'alice';
const PASS = 'alice-Secret-Pw-9931';
const REFRESH = 'refresh-Token-Secret-5521';
const WRONG = 'not-The-Password-1';

describe.each(['RS256', 'ES256'] as const)('bearer token auth (%s) on a real docker-registry', (alg) => {
  let tokens: TokenServer;
  let reg: TestRegistry;
  let img: PushedImage;
  const layer = randomBytes(400_000);

  beforeAll(async () => {
    tokens = await startTokenServer({
      alg,
      users: { [USER]: PASS },
      refreshTokens: { [REFRESH]: USER },
      anonymousPull: false,
    });
    reg = await startRegistry({
      token: {
        realm: tokens.realm,
        service: tokens.service,
        issuer: tokens.issuer,
        rootCertBundlePath: tokens.rootCertBundle,
      },
    });
    const push = tokens.mint('setup', [
      { type: 'repository', name: 'secure/app', actions: ['pull', 'push'] },
    ]);
    img = await pushImage({ url: reg.url, authorization: `Bearer ${push}` }, 'secure/app', 'v1', [
      { data: layer },
    ]);
  });
  afterAll(async () => {
    await reg?.stop();
    await tokens?.stop();
  });

  // every test: no credential or token in any log line, at any level (the logger is at trace)
  let cap: ReturnType<typeof captureLogger>;
  beforeEach(() => {
    cap = captureLogger();
  });
  afterEach(() => {
    expectNoSecrets(cap.text(), [PASS, REFRESH, WRONG, ...tokens.issued], {
      users: [USER],
      where: 'log line',
    });
  });

  const ref = () => parseReference(`${reg.host}/secure/app:v1`);
  const withCreds = (c: { username?: string; password?: string; identityToken?: string }) => {
    const mem = new MemoryCredentialProvider();
    mem.addCredentials({ [ref().toString()]: c });
    return mem;
  };
  const secretsIn = (text: string) =>
    [PASS, REFRESH, ...tokens.issued, Buffer.from(`${USER}:${PASS}`).toString('base64')].filter((s) =>
      text.includes(s),
    );

  it('anonymous access is refused with E_REGISTRY_UNAUTHORIZED', async () => {
    const client = new RegistryClient({ logger: cap.logger });
    try {
      await expect(client.resolveImage(ref())).rejects.toMatchObject({ code: 'E_REGISTRY_UNAUTHORIZED' });
    } finally {
      await client.close();
    }
  });

  it('anonymous tokens work when the token server allows anonymous pulls', async () => {
    tokens.setOptions({ anonymousPull: true });
    const client = new RegistryClient({ logger: cap.logger });
    try {
      expect((await client.resolveImage(ref())).manifestDigest).toBe(img.manifestDigest);
      const anon = tokens.requests.filter(
        (r) => r.method === 'GET' && r.basicUser === undefined && r.status === 200,
      );
      expect(anon.length).toBeGreaterThan(0);
      expect(anon.at(-1)!.scope).toBe('repository:secure/app:pull');
      expect(anon.at(-1)!.service).toBe(tokens.service);
    } finally {
      tokens.setOptions({ anonymousPull: false });
      await client.close();
    }
  });

  it('password credentials go through the OAuth2 password grant; one token serves many requests', async () => {
    const before = tokens.requests.length;
    const client = new RegistryClient({
      credentials: withCreds({ username: USER, password: PASS }),
      logger: cap.logger,
    });
    try {
      expect((await client.resolveImage(ref())).manifestDigest).toBe(img.manifestDigest);
      const blob = await client.openBlob(ref(), img.layers[0]!.digest);
      expect((await blob.read(0, layer.length)).equals(layer)).toBe(true);
      const mine = tokens.requests.slice(before);
      expect(mine).toHaveLength(1);
      expect(mine[0]).toMatchObject({ method: 'POST', grant: 'password', status: 200 });
      expect(secretsIn(cap.text())).toEqual([]);
    } finally {
      await client.close();
    }
  });

  it('an identity token is used as an OAuth2 refresh token', async () => {
    const before = tokens.requests.length;
    const client = new RegistryClient({
      logger: cap.logger,
      credentials: withCreds({ identityToken: REFRESH }),
    });
    try {
      expect((await client.resolveImage(ref())).manifestDigest).toBe(img.manifestDigest);
      expect(tokens.requests.slice(before)[0]).toMatchObject({
        method: 'POST',
        grant: 'refresh_token',
        status: 200,
      });
    } finally {
      await client.close();
    }
  });

  it('falls back to GET with Basic credentials when the token server has no OAuth2 endpoint', async () => {
    tokens.setOptions({ noOAuth: true });
    const before = tokens.requests.length;
    const client = new RegistryClient({
      logger: cap.logger,
      credentials: withCreds({ username: USER, password: PASS }),
    });
    try {
      expect((await client.resolveImage(ref())).manifestDigest).toBe(img.manifestDigest);
      const mine = tokens.requests.slice(before);
      expect(mine.map((r) => `${r.method} ${r.status}`)).toEqual(['POST 404', 'GET 200']);
      expect(mine[1]!.basicUser).toBe(USER);
    } finally {
      tokens.setOptions({ noOAuth: false });
      await client.close();
    }
  });

  it('wrong passwords give E_REGISTRY_UNAUTHORIZED without the secret in the error', async () => {
    const bad = WRONG;
    const client = new RegistryClient({
      logger: cap.logger,
      credentials: withCreds({ username: USER, password: bad }),
    });
    try {
      const err = await client.resolveImage(ref()).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'E_REGISTRY_UNAUTHORIZED' });
      expect(errorText(err)).not.toContain(bad);
    } finally {
      await client.close();
    }
  });

  it('survives a token that expires in the middle of a read (401 -> new token -> same bytes)', async () => {
    // the registry stops accepting tokens after 2 s, but the client is told they last 300 s
    tokens.setOptions({ validForSec: 2, advertisedExpiresIn: 300 });
    const client = new RegistryClient({
      credentials: withCreds({ username: USER, password: PASS }),
      logger: cap.logger,
    });
    try {
      const before = tokens.requests.length;
      const blob = await client.openBlob(ref(), img.layers[0]!.digest);
      const first = await blob.read(0, 100_000);
      expect(first.equals(layer.subarray(0, 100_000))).toBe(true);
      await new Promise((r) => setTimeout(r, 3200));
      const second = await blob.read(100_000, 300_000);
      expect(second.equals(layer.subarray(100_000, 400_000))).toBe(true);
      expect(tokens.requests.length - before).toBe(2);
      expect(secretsIn(cap.text())).toEqual([]);
    } finally {
      tokens.setOptions({ validForSec: 300, advertisedExpiresIn: undefined });
      await client.close();
    }
  });

  it('refreshes proactively when the announced lifetime runs out', async () => {
    tokens.setOptions({ validForSec: 6, advertisedExpiresIn: 6 });
    const client = new RegistryClient({
      logger: cap.logger,
      credentials: withCreds({ username: USER, password: PASS }),
    });
    try {
      const blob = await client.openBlob(ref(), img.layers[0]!.digest);
      const n401 = () => reg.log.filter((l) => l.includes('" 401 ')).length;
      await blob.read(0, 10);
      const beforeTokens = tokens.requests.length;
      // the client keeps tokens until 5 s before the announced expiry: after ~1.2 s it must refetch
      await new Promise((r) => setTimeout(r, 1200));
      const before401 = n401(); // read after the pause: access-log lines lag their responses

      expect((await blob.read(200_000, 10)).equals(layer.subarray(200_000, 200_010))).toBe(true);
      expect(tokens.requests.length - beforeTokens).toBe(1);
      await new Promise((r) => setTimeout(r, 300));
      expect(n401()).toBe(before401);
    } finally {
      tokens.setOptions({ validForSec: 300, advertisedExpiresIn: undefined });
      await client.close();
    }
  });
});
