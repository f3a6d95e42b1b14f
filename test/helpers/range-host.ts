import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { passesBasicAuth } from './basic-auth.js';

/**
 * A registry-shaped blob server on 127.0.0.1 that answers Range the way one row of the fleet
 * table does (issue 15), and counts every body byte it sends, so tests can hold a host to
 * "bytes fetched <= 1.2x the blob".
 */
export type RangeBehaviour =
  /** Distribution: 206, multipart for several ranges */
  | 'multi'
  /** Dragonfly dfdaemon: only the first range of a multi-range request is answered (plain 206) */
  | 'first-range-only'
  /** Zot: multipart up to 16 ranges, 416 above */
  | 'max-16'
  /** Spegel: multi-range requests rejected with 404 */
  | 'multi-404'
  /** Distribution proxy on a cold miss (and Harbor): 200 and the whole blob for any GET */
  | 'ignore-range';

export interface RangeHostOptions {
  blobs: Record<string, Buffer>;
  behaviour: RangeBehaviour;
  /** Leave Content-Type out of 206 answers (multipart ones included). */
  noContentType?: boolean;
  /** Blob GETs answer this status instead (a failing mirror). */
  failStatus?: number;
  /** Bytes per write for whole-blob answers (so a stream passes in steps). */
  chunkBytes?: number;
  /** Whole-blob answers stop after this many bytes until `release()`. */
  holdAfterBytes?: number;
  /** Blob GETs never get an answer (a mirror that stalls). */
  hang?: boolean;
  /** Require HTTP Basic with these credentials on every /v2/ request. */
  basicAuth?: { user: string; pass: string };
}

export interface SeenRequest {
  method: string;
  path: string;
  query: string;
  headers: IncomingMessage['headers'];
}

export interface RangeHost {
  url: string;
  host: string;
  requests: SeenRequest[];
  /** Body bytes sent for blob GETs. */
  bodyBytes(): number;
  /** Most blob GETs answered at the same time. */
  maxConcurrentGets(): number;
  setFailStatus(status: number | undefined): void;
  /** Let held whole-blob answers continue. */
  release(): void;
  stop(): Promise<void>;
}

function parseRanges(h: string | undefined, size: number): Array<[number, number]> | undefined {
  if (!h) return undefined;
  const m = /^bytes=(.+)$/.exec(h.trim());
  if (!m) return undefined;
  return m[1]!.split(',').map((part) => {
    const [a, b] = part.trim().split('-') as [string, string];
    return [Number(a), Math.min(Number(b), size - 1)] as [number, number];
  });
}

export async function startRangeHost(o: RangeHostOptions): Promise<RangeHost> {
  const requests: SeenRequest[] = [];
  let sent = 0;
  let active = 0;
  let maxActive = 0;
  let failStatus = o.failStatus;
  const open = new Set<ServerResponse>();
  let released = o.holdAfterBytes === undefined;
  const held: Array<() => void> = [];

  const send = (res: ServerResponse, status: number, headers: Record<string, string>, body: Buffer) => {
    res.writeHead(status, { ...headers, 'content-length': String(body.length) });
    const step = o.chunkBytes ?? body.length;
    let pos = 0;
    const pump = () => {
      while (pos < body.length) {
        if (res.destroyed) return;
        if (!released && status === 200 && pos >= o.holdAfterBytes!) {
          held.push(pump);
          return;
        }
        const piece = body.subarray(pos, pos + step);
        pos += piece.length;
        // counted as written to the socket (a client hanging up stops the count)
        sent += piece.length;
        if (!res.write(piece)) {
          res.once('drain', pump);
          return;
        }
      }
      res.end();
    };
    pump();
  };

  const server = createServer((req, res) => {
    open.add(res);
    res.on('close', () => open.delete(res));
    const u = new URL(req.url ?? '/', 'http://x');
    requests.push({ method: req.method ?? 'GET', path: u.pathname, query: u.search, headers: req.headers });
    const m = /^\/v2\/.+\/blobs\/(sha256:[0-9a-f]{64})$/.exec(u.pathname);
    const data = m ? o.blobs[m[1]!] : undefined;
    if (o.basicAuth && !passesBasicAuth(req, res, o.basicAuth, 'range-host')) return;
    if (u.pathname === '/v2/' || u.pathname === '/v2') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end('{}');
    }
    if (!m || !data) {
      res.writeHead(404, { 'content-type': 'application/json' });
      return res.end('{"errors":[{"code":"BLOB_UNKNOWN"}]}');
    }
    if (o.hang && req.method === 'GET') return; // closed by stop()
    if (failStatus !== undefined) {
      res.writeHead(failStatus, { 'content-type': 'text/plain' });
      return res.end('nope');
    }
    const base: Record<string, string> = { 'docker-content-digest': m[1]! };
    if (req.method === 'GET') {
      active++;
      maxActive = Math.max(maxActive, active);
      res.once('close', () => active--);
    }
    if (req.method === 'HEAD') {
      res.writeHead(200, { ...base, 'content-length': String(data.length) });
      return res.end();
    }
    const ct = (v: string): Record<string, string> => (o.noContentType ? {} : { 'content-type': v });
    let ranges = parseRanges(req.headers.range, data.length);
    if (!ranges || o.behaviour === 'ignore-range') {
      return send(res, 200, { ...base, ...ct('application/octet-stream') }, data);
    }
    if (ranges.length > 1) {
      if (o.behaviour === 'multi-404') {
        res.writeHead(404, { 'content-type': 'text/plain' });
        return res.end('not found');
      }
      if (o.behaviour === 'max-16' && ranges.length > 16) {
        res.writeHead(416, { 'content-range': `bytes */${data.length}` });
        return res.end();
      }
      if (o.behaviour === 'first-range-only') ranges = ranges.slice(0, 1);
    }
    if (ranges.length === 1) {
      const [a, b] = ranges[0]!;
      return send(
        res,
        206,
        { ...base, 'content-range': `bytes ${a}-${b}/${data.length}`, ...ct('application/octet-stream') },
        data.subarray(a, b + 1),
      );
    }
    const boundary = 'range-host-boundary';
    const parts: Buffer[] = [];
    ranges.forEach(([a, b], i) => {
      parts.push(
        Buffer.from(
          `${i ? '\r\n' : ''}--${boundary}\r\nContent-Range: bytes ${a}-${b}/${data.length}\r\n\r\n`,
        ),
        data.subarray(a, b + 1),
      );
    });
    parts.push(Buffer.from(`\r\n--${boundary}--\r\n`));
    return send(
      res,
      206,
      { ...base, ...ct(`multipart/byteranges; boundary=${boundary}`) },
      Buffer.concat(parts),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    requests,
    bodyBytes: () => sent,
    maxConcurrentGets: () => maxActive,
    release: () => {
      released = true;
      for (const p of held.splice(0)) p();
    },
    setFailStatus: (s) => {
      failStatus = s;
    },
    stop: async () => {
      for (const r of open) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
