/**
 * Issue 14, secrets: a registry that redirects blob reads to pre-signed storage URLs (signature in
 * the URL) and a storage that then fails. The signature and the registry password must appear in
 * no log line at any level and in no error text (what `status` shows as a layer's last error).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCredentialProvider, RegistryClient, parseReference } from '../../src/registry/index.js';
import { always, startFaultServer, type FaultServer } from '../helpers/fault-server.js';
import { sha256 } from '../helpers/push.js';
import { captureLogger, errorText } from '../helpers/registry-log-capture.js';
import { expectNoSecrets } from '../helpers/secrets.js';

const BLOB = randomBytes(300_000);
const DIGEST = sha256(BLOB);
const PASS = 'registry-Pass-Secret-31';
const SIGNATURE = 'presignedSig0123456789abcdef';

describe('pre-signed redirect URLs and credentials stay out of logs and errors', () => {
  let registry: FaultServer;
  let storage: FaultServer;
  beforeAll(async () => {
    registry = await startFaultServer({ blobs: { [DIGEST]: BLOB }, basicAuth: { user: 'u', pass: PASS } });
    storage = await startFaultServer({ blobs: { [DIGEST]: BLOB } });
  });
  afterAll(async () => {
    await registry?.stop();
    await storage?.stop();
  });

  for (const [what, fault] of [
    ['storage answers 403', { kind: 'status', status: 403 }],
    ['storage resets the connection', { kind: 'reset' }],
    ['storage answers 500', { kind: 'status', status: 500 }],
  ] as const) {
    it(`${what}`, async () => {
      const cap = captureLogger();
      const mem = new MemoryCredentialProvider();
      const ref = parseReference(`${registry.host}/secret/repo:t`);
      mem.addCredentials({ [ref.toString()]: { username: 'u', password: PASS } });
      const client = new RegistryClient({
        credentials: mem,
        logger: cap.logger,
        retry: { maxRetries: 1, minWaitMs: 5, maxWaitMs: 20 },
      });
      try {
        const blob = await client.openBlob(ref, DIGEST);
        registry.setPlan((req) =>
          req.method === 'GET' && req.path.includes('/blobs/')
            ? { kind: 'redirect', location: `${storage.url}/bucket/X-Amz-Signature=${SIGNATURE}` }
            : undefined,
        );
        storage.setPlan(always(fault));
        const err = await blob.read(100_000, 1000).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err, 'the storage fault must surface').toBeDefined();
        // the redirect really carried the signature to the storage
        expect(storage.requests.some((r) => r.path.includes(SIGNATURE))).toBe(true);
        expectNoSecrets([errorText(err)], [PASS, SIGNATURE], { users: ['u'], where: 'error text' });
        expect(cap.text(), 'the failure is logged, so the log check sees real lines').not.toBe('');
        expectNoSecrets(cap.text(), [PASS, SIGNATURE], { users: ['u'], where: 'log line' });
      } finally {
        registry.setPlan(undefined);
        storage.setPlan(undefined);
        await client.close();
      }
    });
  }
});
