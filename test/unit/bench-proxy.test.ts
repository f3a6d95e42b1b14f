import { createHash, randomBytes } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LinkModel, mbitToBytesPerSec, startShapingProxy, type ShapingProxy } from '../../bench/lib/proxy.js';

const servers: Server[] = [];
const proxies: ShapingProxy[] = [];

afterEach(async () => {
  for (const p of proxies.splice(0)) await p.close();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

async function listen(handler: (s: Socket) => void, allowHalfOpen = false): Promise<number> {
  const srv = createServer({ allowHalfOpen }, handler);
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const a = srv.address();
  return typeof a === 'object' && a ? a.port : 0;
}

/** Connect, optionally send `payload` then FIN, collect everything until the peer closes. */
function exchange(
  port: number,
  payload?: Buffer,
): Promise<{ data: Buffer; firstByteMs: number; totalMs: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first = -1;
    const parts: Buffer[] = [];
    const s = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    s.on('data', (b: Buffer) => {
      if (first < 0) first = performance.now() - t0;
      parts.push(b);
    });
    s.on('end', () => {
      s.end();
      resolve({ data: Buffer.concat(parts), firstByteMs: first, totalMs: performance.now() - t0 });
    });
    s.on('error', reject);
    s.on('connect', () => {
      if (payload) s.end(payload);
    });
  });
}

describe('LinkModel', () => {
  it('serialises at the link rate and adds the one-way delay', () => {
    const m = new LinkModel({ rateBytesPerSec: 1000, delayMs: 50 });
    // 500 bytes at 1000 B/s take 500 ms, then 50 ms of propagation
    expect(m.schedule(500, 0)).toBe(550);
    // offered while the link is still busy: queued behind the first chunk
    expect(m.schedule(500, 100)).toBe(1050);
    // offered after the link went idle: starts at once
    expect(m.schedule(100, 5000)).toBe(5150);
  });

  it('without a rate only delays, and with neither it is a pass-through', () => {
    expect(new LinkModel({ delayMs: 20 }).schedule(1e9, 7)).toBe(27);
    expect(new LinkModel({ delayMs: 0 }).passthrough).toBe(true);
    expect(new LinkModel({ delayMs: 1 }).passthrough).toBe(false);
    expect(new LinkModel({ rateBytesPerSec: 1, delayMs: 0 }).passthrough).toBe(false);
  });

  it('converts Mbit/s to bytes/s', () => {
    expect(mbitToBytesPerSec(8)).toBe(1e6);
  });
});

describe('shaping proxy', () => {
  it('forwards bytes unchanged in both directions (pass-through)', async () => {
    const payload = randomBytes(3 * 1024 * 1024 + 17);
    // echo server that sends back the sha256 of what it received, then the data itself
    const port = await listen((s) => {
      const parts: Buffer[] = [];
      s.on('data', (b: Buffer) => parts.push(b));
      s.on('end', () => {
        const all = Buffer.concat(parts);
        s.end(Buffer.concat([createHash('sha256').update(all).digest(), all]));
      });
    }, true);
    const proxy = await startShapingProxy({
      targetHost: '127.0.0.1',
      targetPort: port,
      shape: { delayMs: 0 },
    });
    proxies.push(proxy);
    const results = await Promise.all([1, 2, 3].map(() => exchange(proxy.port, payload)));
    const want = createHash('sha256').update(payload).digest();
    for (const r of results) {
      expect(r.data.subarray(0, 32)).toEqual(want);
      expect(r.data.subarray(32).equals(payload)).toBe(true);
    }
    expect(proxy.stats.connections).toBe(3);
    expect(proxy.stats.bytesToTarget).toBe(3 * payload.length);
  });

  it('delivers a reply sent after the client half-closed, through a delayed link', async () => {
    // the server answers only once it saw the client's FIN, then closes: the reply must still
    // arrive although the server's socket is gone before the delayed bytes are delivered
    const port = await listen((s) => {
      s.on('data', () => undefined);
      s.on('end', () => s.end('late reply'));
    }, true);
    const proxy = await startShapingProxy({
      targetHost: '127.0.0.1',
      targetPort: port,
      shape: { delayMs: 40 },
    });
    proxies.push(proxy);
    const r = await exchange(proxy.port, Buffer.from('request'));
    expect(r.data.toString()).toBe('late reply');
  });

  it('adds the handshake round trip plus one RTT before the first byte of a reply', async () => {
    const port = await listen((s) => s.end('x'));
    const delay = 60;
    const proxy = await startShapingProxy({
      targetHost: '127.0.0.1',
      targetPort: port,
      shape: { delayMs: delay },
    });
    proxies.push(proxy);
    const r = await exchange(proxy.port);
    // server speaks first: handshake (2 x delay) + one-way delay back
    expect(r.firstByteMs).toBeGreaterThanOrEqual(3 * delay - 2);
    expect(r.firstByteMs).toBeLessThan(3 * delay + 400);
  });

  it('limits throughput to the link rate', async () => {
    const size = 1_500_000;
    const port = await listen((s) => s.end(randomBytes(size)));
    const rate = 1_000_000; // 8 Mbit/s
    const proxy = await startShapingProxy({
      targetHost: '127.0.0.1',
      targetPort: port,
      shape: { rateBytesPerSec: rate, delayMs: 5 },
    });
    proxies.push(proxy);
    const r = await exchange(proxy.port);
    expect(r.data.length).toBe(size);
    const ideal = (size / rate) * 1000;
    expect(r.totalMs).toBeGreaterThanOrEqual(ideal * 0.95);
    expect(r.totalMs).toBeLessThan(ideal * 1.6 + 500);
  });
});
