/** Secrets never reach the log: the expectNoSecrets helper, and credential lookups at trace level. */
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AuthFileProvider,
  CredentialChain,
  MemoryCredentialProvider,
  type CredentialProvider,
} from '../../src/registry/index.js';
import { captureLogger } from '../helpers/registry-log-capture.js';
import { expectNoSecrets, secretForms } from '../helpers/secrets.js';

describe('expectNoSecrets', () => {
  it('finds a secret in its raw, base64, user:secret base64, URL and JSON forms', () => {
    const secret = 'p@ss "word"/1';
    const leaks = [
      `{"msg":"x","password":"${secret}"}`,
      `Basic ${Buffer.from(`bob:${secret}`).toString('base64')}`,
      `auth=${Buffer.from(secret).toString('base64')}`,
      `url=https://x/?p=${encodeURIComponent(secret)}`,
      JSON.stringify({ secret }),
    ];
    for (const line of leaks) {
      expect(() => expectNoSecrets([line], [secret], { users: ['bob'] }), line).toThrow();
    }
    expect(() => expectNoSecrets(['{"msg":"clean"}', 'bob'], [secret], { users: ['bob'] })).not.toThrow();
    expect(secretForms([secret], ['bob']).length).toBeGreaterThanOrEqual(5);
  });

  it('refuses secrets too short to search for', () => {
    expect(() => expectNoSecrets(['x'], ['p'])).toThrow(/too short/);
  });
});

describe('credential lookups log no secrets at any level', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sgz-secrets-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('chain over failing, helper and memory providers', async () => {
    const PASS = 'mem-Secret-Pass-1234';
    const HELPER_SECRET = 'helper-Secret-5678';
    const CRASH_OUTPUT = 'crash-Output-Secret-9012';
    const bin = join(dir, 'bin');
    await mkdir(bin, { recursive: true });
    await writeFile(
      join(bin, 'docker-credential-leaky'),
      `#!/bin/sh\nread s\nif [ "$s" = "helper.lan" ]; then echo '{"Username":"hu","Secret":"${HELPER_SECRET}"}'; exit 0; fi\n` +
        `echo "${CRASH_OUTPUT}" >&2; echo "${CRASH_OUTPUT}"; exit 3\n`,
    );
    await chmod(join(bin, 'docker-credential-leaky'), 0o755);
    const cfg = join(dir, 'config.json');
    await writeFile(cfg, JSON.stringify({ credsStore: 'leaky' }));
    const cap = captureLogger();
    const failing: CredentialProvider = {
      name: 'bad',
      get: () => Promise.reject(new Error(`provider exploded with ${PASS}`)),
    };
    const mem = new MemoryCredentialProvider();
    mem.addCredentials({ 'mem.lan/a:1': { username: 'mu', password: PASS } });
    const chain = new CredentialChain(
      [failing, new AuthFileProvider({ paths: [cfg], helperDir: bin }), mem],
      cap.logger,
    );
    const q = (host: string, repository: string) => ({
      host,
      repository,
      ref: `${host}/${repository}:1`,
      isUpstream: true,
    });
    expect(await chain.get(q('helper.lan', 'a'))).toEqual({ username: 'hu', password: HELPER_SECRET });
    expect(await chain.get(q('mem.lan', 'a'))).toEqual({ username: 'mu', password: PASS });
    expect(await chain.get(q('crash.lan', 'a'))).toBeUndefined();
    const lines = cap
      .text()
      .split('\n')
      .filter((l) => l !== '');
    // the lookups were logged (so the check below looks at real output)
    expect(lines.some((l) => l.includes('credential provider failed'))).toBe(true);
    expect(lines.some((l) => l.includes('using registry credentials'))).toBe(true);
    expectNoSecrets(lines, [PASS, HELPER_SECRET, CRASH_OUTPUT], { users: ['mu', 'hu'] });
  });
});
