import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { Agent, request } from '../../src/registry/undici-core.js';

const load = createRequire(import.meta.url);
const loadedIndex = (): boolean =>
  Object.keys(load.cache).some((k) => /node_modules\/undici\/index\.js$/.test(k));

describe('undici-core', () => {
  it("loads undici's Agent and request without its index, and they are the index's own", () => {
    expect(loadedIndex()).toBe(false);
    const undici = load('undici') as {
      Agent: unknown;
      Dispatcher: { prototype: { request: unknown } };
    };
    expect(loadedIndex()).toBe(true);
    expect(Agent).toBe(undici.Agent);
    // the index mixes its API functions into Dispatcher.prototype: the same function as ours
    expect(undici.Dispatcher.prototype.request).toBe(load('undici/lib/api/api-request.js'));
  });

  it('sends method, path and query to the URL origin through the given dispatcher', async () => {
    const server = createServer((req, res) => {
      res.setHeader('content-type', 'text/plain');
      res.end(`${req.method} ${req.url} ${req.headers['x-probe']}`);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const agent = new Agent({ connections: 1 });
    try {
      const { port } = server.address() as AddressInfo;
      const res = await request(new URL(`http://127.0.0.1:${port}/v2/a/b/blobs/x?n=1&m=2`), {
        method: 'HEAD',
        headers: { 'x-probe': 'p' },
        dispatcher: agent,
      });
      expect(res.statusCode).toBe(200);
      await res.body.dump();
      const get = await request(new URL(`http://127.0.0.1:${port}/v2/c`), {
        method: 'GET',
        headers: { 'x-probe': 'q' },
        dispatcher: agent,
      });
      expect(await get.body.text()).toBe('GET /v2/c q');
      const query = await request(new URL(`http://127.0.0.1:${port}/token?scope=repository%3Aa%3Apull`), {
        method: 'GET',
        dispatcher: agent,
      });
      expect(await query.body.text()).toBe('GET /token?scope=repository%3Aa%3Apull undefined');
    } finally {
      await agent.close();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});
