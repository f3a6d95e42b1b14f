import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  AuthFileProvider,
  MemoryCredentialProvider,
  RegistryClient,
  parseReference,
} from '../../src/registry/index.js';
import { captureLogger, errorText } from '../helpers/registry-log-capture.js';
import { expectNoSecrets } from '../helpers/secrets.js';
import { pushImage, type PushedImage } from '../helpers/push.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

const USER = 'builder';
const PASS = 'pa55-Very-Secret-7781';
const WRONG = 'wrong-Password-4242';

describe('htpasswd basic auth on a real docker-registry', () => {
  let reg: TestRegistry;
  let img: PushedImage;
  let dir: string;
  const layer = randomBytes(180_000);

  beforeAll(async () => {
    const { stdout } = await promisify(execFile)('/usr/bin/htpasswd', ['-nbB', USER, PASS]);
    reg = await startRegistry({ htpasswd: stdout.trim() + '\n' });
    const authorization = `Basic ${Buffer.from(`${USER}:${PASS}`).toString('base64')}`;
    img = await pushImage({ url: reg.url, authorization }, 'private/app', 'v1', [{ data: layer }]);
    dir = await mkdtemp(join(tmpdir(), 'sgz-auth-'));
  });
  afterAll(async () => {
    await reg?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  // every test: no credential or token in any log line, at any level (the logger is at trace)
  let cap: ReturnType<typeof captureLogger>;
  beforeEach(() => {
    cap = captureLogger();
  });
  afterEach(() => {
    expectNoSecrets(cap.text(), [PASS, WRONG], { users: [USER], where: 'log line' });
  });

  const refStr = () => `${reg.host}/private/app:v1`;

  it('fails with E_REGISTRY_UNAUTHORIZED without credentials (no silent fallback, no retries)', async () => {
    const client = new RegistryClient({ logger: cap.logger });
    try {
      const t0 = Date.now();
      await expect(client.resolveImage(parseReference(refStr()))).rejects.toMatchObject({
        code: 'E_REGISTRY_UNAUTHORIZED',
      });
      expect(Date.now() - t0).toBeLessThan(2000);
    } finally {
      await client.close();
    }
  });

  it('uses helper-channel credentials for the reference, and reads the blob', async () => {
    const mem = new MemoryCredentialProvider();
    mem.addCredentials({ [refStr()]: { username: USER, password: PASS } });
    const client = new RegistryClient({ credentials: mem, logger: cap.logger });
    try {
      const ref = parseReference(refStr());
      const r = await client.resolveImage(ref);
      expect(r.manifestDigest).toBe(img.manifestDigest);
      const blob = await client.openBlob(ref, img.layers[0]!.digest);
      expect((await blob.read(0, layer.length)).equals(layer)).toBe(true);
      // one 401 challenge, then Basic on every request
      expect(reg.log.filter((l) => l.includes('" 401 ')).length).toBeGreaterThan(0);
      const log = cap.text();
      expect(log).not.toContain(PASS);
      expect(log).not.toContain(Buffer.from(`${USER}:${PASS}`).toString('base64'));
    } finally {
      await client.close();
    }
  });

  it('rejects wrong credentials with E_REGISTRY_UNAUTHORIZED and keeps the password out of the error', async () => {
    const mem = new MemoryCredentialProvider();
    const wrong = WRONG;
    mem.addCredentials({ [refStr()]: { username: USER, password: wrong } });
    const client = new RegistryClient({ logger: cap.logger, credentials: mem });
    try {
      const err = await client.resolveImage(parseReference(refStr())).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'E_REGISTRY_UNAUTHORIZED' });
      expect(errorText(err)).not.toContain(wrong);
      expect(errorText(err)).not.toContain(Buffer.from(`${USER}:${wrong}`).toString('base64'));
    } finally {
      await client.close();
    }
  });

  it('does not hand helper-channel credentials to a mirror', async () => {
    // the "mirror" is the registry itself under another name: with credentials it would succeed
    const mirrorHost = reg.host.replace('127.0.0.1', 'localhost');
    const mem = new MemoryCredentialProvider();
    mem.addCredentials({ [refStr()]: { username: USER, password: PASS } });
    const client = new RegistryClient({
      logger: cap.logger,
      credentials: mem,
      hosts: { [reg.host]: { mirrors: [{ host: mirrorHost }] } },
      retry: { maxRetries: 0 },
    });
    try {
      const blob = await client.openBlob(parseReference(refStr()), img.layers[0]!.digest);
      // the mirror answered 401 (no credentials), so the registry itself was used
      expect((blob as unknown as { endpoint: { host: string } }).endpoint.host).toBe(reg.host);
    } finally {
      await client.close();
    }
  });

  it('reads containers auth.json', async () => {
    const authFile = join(dir, 'auth.json');
    await writeFile(
      authFile,
      JSON.stringify({ auths: { [reg.host]: { auth: Buffer.from(`${USER}:${PASS}`).toString('base64') } } }),
    );
    const client = new RegistryClient({
      logger: cap.logger,
      credentials: new AuthFileProvider({ paths: [authFile] }),
    });
    try {
      expect((await client.resolveImage(parseReference(refStr()))).manifestDigest).toBe(img.manifestDigest);
    } finally {
      await client.close();
    }
  });

  it('runs docker credHelpers (docker-credential-<name> get) asynchronously', async () => {
    const bin = join(dir, 'bin');
    await rm(bin, { recursive: true, force: true });
    await mkdir(bin, { recursive: true });
    const helper = join(bin, 'docker-credential-sgztest');
    // records the server it was asked about, answers with the credentials
    await writeFile(
      helper,
      `#!/bin/sh\nread server\necho "$1 $server" >> ${join(dir, 'helper.log')}\nprintf '{"ServerURL":"%s","Username":"${USER}","Secret":"${PASS}"}' "$server"\n`,
    );
    await chmod(helper, 0o755);
    const cfg = join(dir, 'config.json');
    await writeFile(cfg, JSON.stringify({ auths: {}, credHelpers: { [reg.host]: 'sgztest' } }));
    const client = new RegistryClient({
      logger: cap.logger,
      credentials: new AuthFileProvider({ paths: [cfg], helperDir: bin }),
    });
    try {
      expect((await client.resolveImage(parseReference(refStr()))).manifestDigest).toBe(img.manifestDigest);
      expect((await readFile(join(dir, 'helper.log'), 'utf8')).trim()).toBe(`get ${reg.host}`);
    } finally {
      await client.close();
    }
  });
});
