import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { passesBasicAuth } from './basic-auth.js';

/**
 * A small registry-shaped HTTP server on 127.0.0.1 that serves blobs (and optionally manifests)
 * with correct Range semantics, and misbehaves on demand: one `Fault` per request, chosen by a
 * plan function. Every request is recorded (method, path, query, headers) for assertions.
 */
export type Fault =
  /** answer with this status (and headers) and a small body */
  | { kind: 'status'; status: number; headers?: Record<string, string> }
  /** TCP reset before any response */
  | { kind: 'reset' }
  /** headers and half of the body, then a TCP reset */
  | { kind: 'reset-mid-body' }
  /** Content-Length announced, half of the body sent, then the connection is closed */
  | { kind: 'truncate' }
  /** chunked response that ends cleanly after half of the bytes its Content-Range promises */
  | { kind: 'short-body' }
  /** 200 with the whole blob, whatever Range said */
  | { kind: 'ignore-range' }
  /** answer multi-range requests with this status (single ranges are served) */
  | { kind: 'reject-multi'; status: number }
  /** answer a multi-range request with a plain 206 holding only its first range */
  | { kind: 'partial-206' }
  /** redirect (307 by default) to `location` + the original path and query */
  | { kind: 'redirect'; location: string; status?: number }
  /** never answer */
  | { kind: 'hang' }
  /** Content-Range with a wrong total size */
  | { kind: 'bad-total' }
  /** Content-Range `bytes a-b/*` */
  | { kind: 'star-total' }
  /** serve correctly but only after a delay */
  | { kind: 'delay'; ms: number }
  /**
   * a plain 206 for bytes start-end (whatever was asked), Content-Range total `total` (default: the
   * blob size), the blob's bytes of that span as far as it has them; `noLength`: chunked, no
   * Content-Length
   */
  | { kind: 'range-206'; start: number; end: number; total?: number; noLength?: boolean };

export interface RecordedRequest {
  method: string;
  path: string;
  query: string;
  headers: IncomingMessage['headers'];
}

export type FaultPlan = (req: RecordedRequest, index: number) => Fault | undefined;

export interface FaultServerOptions {
  /** digest -> bytes, served under any repository */
  blobs?: Record<string, Buffer>;
  /** `<repo>:<reference>` -> manifest */
  manifests?: Record<string, { body: Buffer; mediaType: string }>;
  plan?: FaultPlan;
  /** require HTTP Basic for every /v2/ request */
  basicAuth?: { user: string; pass: string };
}

export interface FaultServer {
  url: string;
  /** host:port */
  host: string;
  requests: RecordedRequest[];
  setPlan(plan: FaultPlan | undefined): void;
  addBlob(digest: string, data: Buffer): void;
  /** blob GETs (not HEAD) seen so far */
  blobGets(): RecordedRequest[];
  stop(): Promise<void>;
}

/** A plan that applies `faults` to successive blob GETs (HEADs and others pass), then serves normally. */
export function faultSequence(...faults: Fault[]): FaultPlan {
  const queue = [...faults];
  return (req) => (req.method === 'GET' && req.path.includes('/blobs/') ? queue.shift() : undefined);
}

/** Apply `fault` to every blob GET. */
export function always(fault: Fault): FaultPlan {
  return (req) => (req.method === 'GET' && req.path.includes('/blobs/') ? fault : undefined);
}

function parseRanges(h: string | undefined, size: number): Array<[number, number]> | undefined {
  if (!h) return undefined;
  const m = /^bytes=(.+)$/.exec(h.trim());
  if (!m) return undefined;
  const out: Array<[number, number]> = [];
  for (const part of m[1]!.split(',')) {
    const [a, b] = part.trim().split('-') as [string, string];
    if (a === '') out.push([Math.max(0, size - Number(b)), size - 1]);
    else out.push([Number(a), b === '' ? size - 1 : Math.min(Number(b), size - 1)]);
  }
  return out;
}

export async function startFaultServer(opts: FaultServerOptions = {}): Promise<FaultServer> {
  const blobs = new Map(Object.entries(opts.blobs ?? {}));
  const requests: RecordedRequest[] = [];
  let plan = opts.plan;
  const hanging = new Set<ServerResponse>();

  const serveBlob = (
    req: IncomingMessage,
    res: ServerResponse,
    data: Buffer,
    digest: string,
    fault: Fault | undefined,
  ) => {
    const size = data.length;
    const base = { 'docker-content-digest': digest, 'accept-ranges': 'bytes' };
    if (req.method === 'HEAD') {
      res.writeHead(200, {
        ...base,
        'content-length': String(size),
        'content-type': 'application/octet-stream',
      });
      return res.end();
    }
    const ranges = parseRanges(req.headers.range, size);
    if (!ranges || fault?.kind === 'ignore-range') {
      if (fault?.kind === 'truncate' || fault?.kind === 'reset-mid-body')
        return brokenBody(res, 200, { ...base }, data, fault.kind);
      res.writeHead(200, {
        ...base,
        'content-length': String(size),
        'content-type': 'application/octet-stream',
      });
      return res.end(data);
    }
    if (fault?.kind === 'range-206') {
      const body = data.subarray(fault.start, fault.end + 1);
      const h: Record<string, string> = {
        ...base,
        'content-range': `bytes ${fault.start}-${fault.end}/${fault.total ?? size}`,
        'content-type': 'application/octet-stream',
      };
      if (!fault.noLength) h['content-length'] = String(body.length);
      res.writeHead(206, h);
      return res.end(body);
    }
    if (ranges.length > 1 && fault?.kind === 'reject-multi') {
      res.writeHead(fault.status, { 'content-type': 'text/plain' });
      return res.end('multi-range not supported');
    }
    if (ranges.some(([a, b]) => a >= size || b < a)) {
      res.writeHead(416, { 'content-range': `bytes */${size}` });
      return res.end();
    }
    if (ranges.length === 1 || fault?.kind === 'partial-206') {
      const [a, b] = ranges[0]!;
      const total =
        fault?.kind === 'bad-total' ? String(size + 1) : fault?.kind === 'star-total' ? '*' : String(size);
      const h = {
        ...base,
        'content-range': `bytes ${a}-${b}/${total}`,
        'content-type': 'application/octet-stream',
      };
      const body = data.subarray(a, b + 1);
      if (fault?.kind === 'truncate' || fault?.kind === 'reset-mid-body')
        return brokenBody(res, 206, h, body, fault.kind);
      if (fault?.kind === 'short-body') {
        res.writeHead(206, h); // no Content-Length: chunked, ends cleanly
        res.write(body.subarray(0, Math.floor(body.length / 2)));
        return res.end();
      }
      res.writeHead(206, { ...h, 'content-length': String(body.length) });
      return res.end(body);
    }
    const boundary = randomBytes(16).toString('hex');
    const pieces: Buffer[] = [];
    for (const [a, b] of ranges) {
      pieces.push(
        Buffer.from(
          `\r\n--${boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes ${a}-${b}/${size}\r\n\r\n`,
        ),
      );
      pieces.push(data.subarray(a, b + 1));
    }
    pieces.push(Buffer.from(`\r\n--${boundary}--\r\n`));
    const body = Buffer.concat(pieces);
    const h = { ...base, 'content-type': `multipart/byteranges; boundary=${boundary}` };
    if (fault?.kind === 'truncate' || fault?.kind === 'reset-mid-body')
      return brokenBody(res, 206, h, body, fault.kind);
    res.writeHead(206, { ...h, 'content-length': String(body.length) });
    res.end(body);
  };

  const brokenBody = (
    res: ServerResponse,
    status: number,
    h: Record<string, string>,
    body: Buffer,
    kind: 'truncate' | 'reset-mid-body',
  ) => {
    res.writeHead(status, { ...h, 'content-length': String(body.length) });
    res.write(body.subarray(0, Math.floor(body.length / 2)), () => {
      setTimeout(() => {
        if (kind === 'reset-mid-body') res.socket?.resetAndDestroy();
        else res.socket?.end();
      }, 10);
    });
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const u = new URL(req.url ?? '/', 'http://x');
    const rec: RecordedRequest = {
      method: req.method ?? '',
      path: u.pathname,
      query: u.search,
      headers: req.headers,
    };
    const index = requests.length;
    requests.push(rec);
    const fault = plan?.(rec, index);
    if (fault?.kind === 'delay') {
      setTimeout(() => respond(req, res, u, rec, undefined), fault.ms);
      return;
    }
    respond(req, res, u, rec, fault);
  };

  const respond = (
    req: IncomingMessage,
    res: ServerResponse,
    u: URL,
    rec: RecordedRequest,
    fault: Fault | undefined,
  ) => {
    if (fault?.kind === 'hang') {
      hanging.add(res);
      return;
    }
    if (fault?.kind === 'reset') return req.socket.resetAndDestroy();
    if (fault?.kind === 'status') {
      res.writeHead(fault.status, { 'content-type': 'application/json', ...fault.headers });
      return res.end(JSON.stringify({ errors: [{ code: 'INJECTED', message: `injected ${fault.status}` }] }));
    }
    if (fault?.kind === 'redirect') {
      res.writeHead(fault.status ?? 307, { location: `${fault.location}${u.pathname}${u.search}` });
      return res.end();
    }
    if (u.pathname === '/v2/' || u.pathname === '/v2') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end('{}');
    }
    if (opts.basicAuth && !passesBasicAuth(req, res, opts.basicAuth, 'fault-server')) return;
    const m = /^\/v2\/(.+)\/(blobs|manifests)\/([^/]+)$/.exec(u.pathname);
    if (m && m[2] === 'blobs') {
      const data = blobs.get(m[3]!);
      if (data) return serveBlob(req, res, data, m[3]!, fault);
    }
    if (m && m[2] === 'manifests') {
      const man = opts.manifests?.[`${m[1]}:${m[3]}`];
      if (man) {
        res.writeHead(200, { 'content-type': man.mediaType, 'content-length': String(man.body.length) });
        return res.end(req.method === 'HEAD' ? undefined : man.body);
      }
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ errors: [{ code: m?.[2] === 'manifests' ? 'MANIFEST_UNKNOWN' : 'BLOB_UNKNOWN' }] }),
    );
  };

  const server: Server = createServer(handle);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    requests,
    setPlan(p) {
      plan = p;
    },
    addBlob(d, data) {
      blobs.set(d, data);
    },
    blobGets: () => requests.filter((r) => r.method === 'GET' && r.path.includes('/blobs/')),
    async stop() {
      for (const r of hanging) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
