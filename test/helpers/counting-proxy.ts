import { connect, createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a server (a registry), counting the bytes the server sent
 * through it: what a client fetched from the registry, across any number of client processes,
 * including requests cut off by a killed client.
 */
export interface CountingProxy {
  /** host:port to give to clients. */
  host: string;
  /** Bytes received from the upstream server so far (headers included). */
  readonly upstreamBytes: number;
  /** Resolves when no connection is open (e.g. after the client process exited). */
  whenIdle(): Promise<void>;
  close(): Promise<void>;
}

export async function startCountingProxy(upstreamPort: number): Promise<CountingProxy> {
  let upstreamBytes = 0;
  const open = new Set<Socket>();
  let idleWaiters: Array<() => void> = [];
  const settle = (): void => {
    if (open.size > 0) return;
    const w = idleWaiters;
    idleWaiters = [];
    for (const r of w) r();
  };
  const track = (s: Socket): void => {
    open.add(s);
    s.once('close', () => {
      open.delete(s);
      settle();
    });
  };
  const server: Server = createServer((client) => {
    const upstream = connect(upstreamPort, '127.0.0.1');
    track(client);
    track(upstream);
    upstream.on('data', (d: Buffer) => {
      upstreamBytes += d.length;
    });
    client.pipe(upstream);
    upstream.pipe(client);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    host: `127.0.0.1:${port}`,
    get upstreamBytes() {
      return upstreamBytes;
    },
    whenIdle: () =>
      new Promise<void>((r) => {
        idleWaiters.push(r);
        settle();
      }),
    close: () =>
      new Promise<void>((r) => {
        for (const s of open) s.destroy();
        server.close(() => r());
      }),
  };
}
