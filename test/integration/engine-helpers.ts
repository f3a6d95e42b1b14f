/**
 * Helpers for the engine's integration tests: a small HTTP server with Range support (optionally
 * corrupting bytes or adding latency), an HTTP RangeReader for it, a plain-HTTP blob push for the
 * real test registry, and a deterministic tree generator whose file bytes can be recomputed.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StoreError } from '../../src/util/errors.js';
import type { RangeReader } from '../../src/util/range-reader.js';

export interface RangeServer {
  url: string;
  requests: number;
  bytes: number;
  /** Blob offsets whose byte is flipped when served. */
  corrupt: Set<number>;
  latencyMs: number;
  close(): Promise<void>;
}

/** Serve one file at `/blob` with single-range GETs (206) and HEAD, on 127.0.0.1:<random>. */
export async function startRangeServer(path: string): Promise<RangeServer> {
  const size = (await stat(path)).size;
  const state = { requests: 0, bytes: 0, corrupt: new Set<number>(), latencyMs: 0 };
  const server: Server = createServer((req, res) => {
    void (async () => {
      if (req.url !== '/blob') {
        res.writeHead(404).end();
        return;
      }
      if (req.method === 'HEAD') {
        res.writeHead(200, { 'content-length': size, 'accept-ranges': 'bytes' }).end();
        return;
      }
      state.requests++;
      const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
      if (m === null) {
        res.writeHead(400).end('single range required');
        return;
      }
      const start = Number(m[1]);
      const end = Math.min(Number(m[2]), size - 1);
      if (start > end) {
        res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
        return;
      }
      if (state.latencyMs > 0) await new Promise((r) => setTimeout(r, state.latencyMs));
      const len = end - start + 1;
      state.bytes += len;
      res.writeHead(206, { 'content-length': len, 'content-range': `bytes ${start}-${end}/${size}` });
      const hits = [...state.corrupt].filter((o) => o >= start && o <= end);
      if (hits.length === 0) {
        createReadStream(path, { start, end }).pipe(res);
        return;
      }
      const fh = await open(path, 'r');
      const buf = Buffer.alloc(len);
      await fh.read(buf, 0, len, start);
      await fh.close();
      for (const o of hits) buf[o - start] = buf[o - start]! ^ 0xff;
      res.end(buf);
    })().catch(() => res.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return Object.assign(state, {
    url: `http://127.0.0.1:${port}/blob`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  });
}

/** Minimal HTTP RangeReader (single ranges) used as the engine's blob source in these tests. */
export class HttpRangeSource implements RangeReader {
  requests = 0;
  bytes = 0;

  constructor(
    private readonly url: string,
    readonly size: number,
  ) {}

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    if (length === 0) return Buffer.alloc(0);
    this.requests++;
    const res = await fetch(this.url, {
      headers: { range: `bytes=${offset}-${offset + length - 1}` },
      ...(signal ? { signal } : {}),
    }).catch((err: unknown) => {
      throw new StoreError('E_REGISTRY_NETWORK', String(err), { offset });
    });
    const body = Buffer.from(await res.arrayBuffer());
    if (res.status !== 206 || body.length !== length) {
      throw new StoreError('E_REGISTRY_STATUS', `unexpected answer ${res.status} (${body.length} bytes)`, {
        offset,
      });
    }
    this.bytes += length;
    return body;
  }
}

/** Monolithic blob upload to a distribution registry (POST then PUT with digest). */
export async function pushBlob(registryUrl: string, repo: string, data: Buffer): Promise<string> {
  const digest = 'sha256:' + createHash('sha256').update(data).digest('hex');
  const start = await fetch(`${registryUrl}/v2/${repo}/blobs/uploads/`, { method: 'POST' });
  if (start.status !== 202) throw new Error(`upload start: HTTP ${start.status}`);
  const loc = new URL(start.headers.get('location')!, registryUrl);
  loc.searchParams.set('digest', digest);
  const put = await fetch(loc, {
    method: 'PUT',
    body: data,
    headers: { 'content-type': 'application/octet-stream' },
  });
  if (put.status !== 201) throw new Error(`blob put: HTTP ${put.status} ${await put.text()}`);
  return digest;
}

/**
 * Write `sizes.length` files under `dir` (spread over subdirectories): even-numbered files are
 * random bytes, odd ones compressible text. Returns the relative paths.
 */
export async function makeTree(dir: string, sizes: number[]): Promise<string[]> {
  const { mkdir, writeFile } = await import('node:fs/promises');
  const { randomBytes } = await import('node:crypto');
  const paths: string[] = [];
  const line = Buffer.from('the quick brown fox jumps over the lazy dog 0123456789\n');
  for (let i = 0; i < sizes.length; i++) {
    const rel = `d${i % 17}/f${i}.bin`;
    await mkdir(`${dir}/d${i % 17}`, { recursive: true });
    const size = sizes[i]!;
    let data: Buffer;
    if (i % 2 === 0) data = randomBytes(size);
    else {
      data = Buffer.alloc(size);
      for (let o = 0; o < size; o += line.length) line.copy(data, o);
      // sprinkle a little entropy so chunks differ
      for (let o = 0; o < size; o += 4096) data[o] = (i * 7 + o) & 0xff;
    }
    await writeFile(`${dir}/${rel}`, data);
    paths.push(rel);
  }
  return paths;
}

/** File sizes from 0 to more than 8 chunks, including exact chunk multiples and off-by-ones. */
export function sizeMix(chunk: number, count: number, rand: () => number = Math.random): number[] {
  const fixed = [
    0,
    0,
    1,
    2,
    511,
    512,
    513,
    chunk - 1,
    chunk,
    chunk + 1,
    2 * chunk,
    8 * chunk,
    8 * chunk + 1,
    9 * chunk - 7,
  ];
  const out = [...fixed];
  while (out.length < count) {
    const r = rand();
    if (r < 0.4) out.push(Math.floor(rand() * 16 * 1024));
    else if (r < 0.7) out.push(Math.floor(rand() * chunk));
    else out.push(Math.floor(rand() * 9.5 * chunk));
  }
  return out;
}

/** Expected bytes of a layer file: the source tree, or the landmark byte the writer adds (spec §1.3). */
export async function expectedFile(tree: string, path: string): Promise<Buffer> {
  if (path === '.prefetch.landmark' || path === '.no.prefetch.landmark') return Buffer.from([0x0f]);
  const { readFile } = await import('node:fs/promises');
  return await readFile(`${tree}/${path}`);
}

/** Deterministic pseudo-random numbers in [0, 1) (an LCG: reproducible trees across runs). */
export function seededRandom(seed: number): () => number {
  let state = seed;
  return () => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
}

export interface TarFixture {
  /** Scratch directory holding everything (remove it in afterAll). */
  work: string;
  /** The source tree the tar was made from (expected file bytes). */
  tree: string;
  tarPath: string;
}

/** A scratch dir with a tree of files of `sizes` (see makeTree) and its tar made by GNU tar. */
export async function makeTarFixture(prefix: string, sizes: number[]): Promise<TarFixture> {
  const { mkdtemp } = await import('node:fs/promises');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { execFileSync } = await import('node:child_process');
  const work = await mkdtemp(join(tmpdir(), prefix));
  const tree = join(work, 'tree');
  await makeTree(tree, sizes);
  const tarPath = join(work, 'layer.tar');
  execFileSync('tar', ['-cf', tarPath, '-C', tree, '.']);
  return { work, tree, tarPath };
}
