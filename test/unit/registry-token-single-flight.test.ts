import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { Authorizer } from '../../src/registry/authorizer.js';
import type { Endpoint } from '../../src/registry/hosts.js';

describe('shared token fetch', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a caller giving up does not fail the others waiting on the same token', async () => {
    // a token server that answers only when the test says so
    const held: ServerResponse[] = [];
    let arrived!: () => void;
    const requestSeen = new Promise<void>((r) => (arrived = r));
    const server = createServer((_req, res) => {
      held.push(res);
      arrived();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    const agent = new Agent();
    cleanups.push(() => agent.close());
    const port = (server.address() as AddressInfo).port;
    const auth = new Authorizer(undefined, () => Promise.resolve(agent));
    const ep: Endpoint = {
      host: 'registry.test',
      scheme: 'http',
      repository: 'lib/app',
      isUpstream: true,
      skipVerify: false,
      options: {},
      origin: 'http://registry.test',
    };
    const ctx = { ep, scope: 'repository:lib/app:pull', ref: 'registry.test/lib/app:v1' };
    const challenge = `Bearer realm="http://127.0.0.1:${port}/token",service="registry.test"`;

    const first = new AbortController();
    const a = auth.onUnauthorized(ctx, challenge, undefined, first.signal);
    const b = auth.onUnauthorized(ctx, challenge, undefined, new AbortController().signal);
    await requestSeen;
    first.abort(new Error('first caller deadline'));
    await expect(a).rejects.toMatchObject({ code: 'E_ABORTED' });

    held[0]!.writeHead(200, { 'content-type': 'application/json' });
    held[0]!.end(JSON.stringify({ token: 'tok-1', expires_in: 300 }));
    expect(await b).toBe('Bearer tok-1');
    expect(auth.tokenRequests).toBe(1);
    // the token is cached for later requests
    expect(await auth.headerFor(ctx)).toBe('Bearer tok-1');
  });
});
