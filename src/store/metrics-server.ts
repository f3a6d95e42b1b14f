import type { Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { StoreError, asStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { enableMetrics, renderMetrics } from '../util/metrics.js';

// Loaded with require, not import: on Node 24 an ES import of node:http builds its namespace,
// which reads lazy exports that load Node's internal copy of undici (+2.4 MB heap in every store,
// measured, whether metrics are on or not).
const { createServer } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/**
 * `--metrics-address host:port` (config `metrics_address`): a tiny HTTP server answering
 * `GET /metrics` in the Prometheus text format. Off unless an address is configured; starting it is
 * what turns recording on.
 */

export interface MetricsServer {
  /** `host:port` actually bound (port 0 picks a free one). */
  readonly address: string;
  close(): Promise<void>;
}

/** `host:port`, `[v6]:port` or `:port` (all interfaces) -> parts; a typed error for anything else. */
export function parseMetricsAddress(addr: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:[\]/]*)):(\d{1,5})$/.exec(addr);
  const port = m ? Number(m[3]) : NaN;
  if (m === null || port > 65535) {
    throw new StoreError(
      'E_CONFIG',
      `metrics address must be host:port (e.g. 127.0.0.1:9402), got ${JSON.stringify(addr)}`,
      {
        key: 'metrics_address',
      },
    );
  }
  return { host: m[1] ?? (m[2] === '' ? '0.0.0.0' : m[2]!), port };
}

export async function startMetricsServer(addr: string, logger?: Logger): Promise<MetricsServer> {
  const { host, port } = parseMetricsAddress(addr);
  enableMetrics({ processMetrics: true });
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found; try /metrics\n');
      return;
    }
    renderMetrics().then(
      ({ contentType, body }) => {
        res.writeHead(200, { 'content-type': contentType });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
      (err: unknown) => {
        logger?.warn({ err: asStoreError(err) }, 'rendering metrics failed');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics failed\n');
      },
    );
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void =>
      reject(asStoreError(err, 'E_CONFIG', { key: 'metrics_address', address: addr }));
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', (err) => logger?.error({ err }, 'metrics server error'));
  const a = server.address() as AddressInfo;
  const address = a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
  logger?.info({ address }, 'metrics listening on /metrics');
  let closed: Promise<void> | undefined;
  return {
    address,
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closed;
    },
  };
}
