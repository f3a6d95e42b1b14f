/**
 * A registry's 404 MANIFEST_UNKNOWN names the image asked for in the one-line error (the CLI prints
 * `stargz-store: <code>: <message>`), not just "manifest not found".
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegistryClient } from '../../src/registry/index.js';
import { notFoundMessage } from '../../src/registry/not-found.js';
import { parseReference } from '../../src/registry/reference.js';
import { StoreError } from '../../src/util/errors.js';

describe('registry 404 MANIFEST_UNKNOWN', () => {
  let server: Server;
  let host: string;

  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.url === '/v2/') return res.writeHead(200).end('{}');
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ errors: [{ code: 'MANIFEST_UNKNOWN', message: 'manifest unknown' }] }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  it('names the reference in the message', async () => {
    const client = new RegistryClient({ retry: { maxRetries: 0, minWaitMs: 1, maxWaitMs: 1 } });
    try {
      const ref = `${host}/library/missing:v9`;
      const err = await client.resolveImage(parseReference(ref)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreError);
      const e = err as StoreError;
      expect(e.code).toBe('E_REGISTRY_NOT_FOUND');
      expect(e.message).toBe(`manifest of ${ref} not found (MANIFEST_UNKNOWN)`);
      expect(e.message).not.toContain('\n');
    } finally {
      await client.close();
    }
  });

  it('a by-digest ref is named once (the digest is part of it)', async () => {
    const client = new RegistryClient({ retry: { maxRetries: 0, minWaitMs: 1, maxWaitMs: 1 } });
    try {
      const digest = `sha256:${'ab'.repeat(32)}`;
      const ref = `${host}/library/missing@${digest}`;
      const err = await client.resolveImage(parseReference(ref)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect((err as StoreError).message).toBe(`manifest of ${ref} not found (MANIFEST_UNKNOWN)`);
    } finally {
      await client.close();
    }
  });

  it("an index's platform manifest names the ref and the digest asked for", () => {
    const digest = `sha256:${'cd'.repeat(32)}`;
    expect(
      notFoundMessage(
        { what: 'manifest', ref: 'r.example/app:v1', reference: digest },
        ' (MANIFEST_UNKNOWN)',
      ),
    ).toBe(`manifest of r.example/app:v1 (${digest}) not found (MANIFEST_UNKNOWN)`);
    expect(notFoundMessage({ what: 'blob' }, '')).toBe('blob not found');
  });
});
