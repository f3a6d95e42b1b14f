import { mkdir, rm } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { BlobStore, ChunkCache, chunkCacheBudget } from '../cache/index.js';
import { readLayerToc } from '../format/open-layer.js';
import { FetchScheduler } from '../layer/index.js';
import { MEDIA_OCI_MANIFEST } from '../registry/manifest.js';
import { RegistryClient } from '../registry/client.js';
import { encodeAlsRefName } from '../registry/reference.js';
import { withDeadline } from '../util/abort.js';
import { withoutCrashPoints } from '../util/crash-points.js';
import { silentLogger } from '../util/logger.js';
import { loadRehearsalImage, type RehearsalImage } from './rehearsal-image.js';
import { REHEARSAL_IMAGE } from './rehearsal-image-data.js';
import { createLayerStore } from './index.js';
import type { OpContext, VirtualFs } from '../fs/vfs.js';

/**
 * A rehearsal of a client's first lookups, run once before the mount: a throwaway store (its own
 * root `<root>/rehearsal/`, registry client and caches, a silent logger) resolves the two layers of a small
 * synthetic image (rehearsal-image.ts) served by an in-process registry on 127.0.0.1, and reads
 * their info, directory tree and one file of several chunks through the same VirtualFs that FUSE
 * serves.
 *
 * Why: a fresh store met the client's first lookup with cold code. Every step of it ran in V8's
 * interpreter the first time (the HTTP client and its parser, manifest and config handling, the
 * TOC reader, the layer engine): on the lab's large image the first layer answered in 110-170 ms
 * against 50-60 ms for the same lookup once another image had been looked up in that process
 * (loopback, this machine), and the Go store answers it in 10-15 ms. After the rehearsal the
 * client's first lookup meets compiled code.
 *
 * Nothing of it stays: its root is removed (also one a killed store left; the root's instance lock
 * keeps two stores from sharing it), the server closed, and nothing is logged or counted by the
 * real store. A failure is never fatal (the caller logs it): it only means a
 * slower first lookup.
 */

export interface RehearsalOptions {
  /** The throwaway store's root, removed before and after (rootLayout(root).rehearsal). */
  root: string;
  /** Gives up after this long (default 10 s). */
  deadlineMs?: number;
  /** The image to rehearse with (default: the saved one, rehearsal-image-data.ts). */
  image?: RehearsalImage;
}

const REPO = 'rehearsal/image';
const TAG = 'latest';
/** The kernel's read size for FUSE (128 KiB): the file is read the way a client reads it. */
const READ = 128 * 1024;

/** Serve `image` like a registry (manifest by tag, blobs with single-range Range support). */
function serveImage(image: RehearsalImage): Promise<{ server: Server; host: string }> {
  // node:http through require: an ES import of it loads Node's internal undici (metrics-server.ts)
  const http = createRequire(import.meta.url)('node:http') as typeof import('node:http');
  const server = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = req.url ?? '';
    const body = (status: number, data: Buffer, headers: Record<string, string | number> = {}): void => {
      res.writeHead(status, { 'content-length': data.length, ...headers });
      res.end(req.method === 'HEAD' ? undefined : data);
    };
    if (path === '/v2/') return body(200, Buffer.from('{}'), { 'content-type': 'application/json' });
    if (path === `/v2/${REPO}/manifests/${TAG}`) {
      return body(200, image.manifest, { 'content-type': MEDIA_OCI_MANIFEST });
    }
    const blob = path.startsWith(`/v2/${REPO}/blobs/`)
      ? image.blobs.get(path.slice(`/v2/${REPO}/blobs/`.length))
      : undefined;
    if (blob === undefined) return body(404, Buffer.from('{"errors":[{"code":"BLOB_UNKNOWN"}]}'));
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    if (m === null) return body(200, blob);
    const start = Number(m[1]);
    const end = Math.min(Number(m[2]), blob.length - 1);
    body(206, blob.subarray(start, end + 1), { 'content-range': `bytes ${start}-${end}/${blob.length}` });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const a = server.address();
      resolve({ server, host: `127.0.0.1:${typeof a === 'object' && a !== null ? a.port : 0}` });
    });
  });
}

/** A client's lookups of one layer: info, the diff tree, a symlink, one file read whole; its bytes. */
async function lookUpLayer(vfs: VirtualFs, layerDir: string, file: string, ctx: OpContext): Promise<number> {
  await vfs.getattr(layerDir, ctx);
  const info = await vfs.open(`${layerDir}/info`, 0, ctx);
  await info.read(0, READ, ctx.signal);
  info.release?.();
  const diff = `${layerDir}/diff`;
  const walk = async (dir: string): Promise<void> => {
    for (const e of await vfs.readdir(dir, ctx)) {
      if (e.name === '.' || e.name === '..') continue;
      const p = `${dir}/${e.name}`;
      const attr = await vfs.getattr(p, ctx);
      if ((attr.mode & 0o170000) === 0o040000) await walk(p);
      else if ((attr.mode & 0o170000) === 0o120000) await vfs.readlink(p, ctx);
    }
  };
  await walk(diff);
  const f = await vfs.open(`${diff}/${file}`, 0, ctx);
  const { size } = await vfs.getattr(`${diff}/${file}`, ctx);
  let read = 0;
  for (let at = 0; at < size; at += READ) read += (await f.read(at, READ, ctx.signal)).length;
  f.release?.();
  return read;
}

export interface RehearsalResult {
  ms: number;
  /** Layers resolved (each with its info, tree and one file read). */
  layers: number;
  /** File bytes read through the VirtualFs (verified on the way). */
  bytesRead: number;
}

/** Run the rehearsal; resolves with what it did, rejects with why it failed. */
export function rehearseFirstLookups(opts: RehearsalOptions): Promise<RehearsalResult> {
  return withoutCrashPoints(() => rehearse(opts));
}

async function rehearse(opts: RehearsalOptions): Promise<RehearsalResult> {
  const started = performance.now();
  const image = opts.image ?? loadRehearsalImage(REHEARSAL_IMAGE);
  const root = opts.root;
  await rm(root, { recursive: true, force: true });
  await mkdir(root, { recursive: true, mode: 0o700 });
  let bytesRead = 0;
  const registry = new RegistryClient({ logger: silentLogger, retry: { maxRetries: 0 } });
  let served: { server: Server; host: string } | undefined;
  let cache: ChunkCache | undefined;
  let blobs: BlobStore | undefined;
  try {
    served = await serveImage(image);
    const { host } = served;
    cache = await ChunkCache.open({ root, minFreeBytes: 0, logger: silentLogger });
    blobs = await BlobStore.open({ root, budget: chunkCacheBudget(cache), logger: silentLogger });
    const store = createLayerStore({
      root,
      registry,
      cache,
      blobs,
      logger: silentLogger,
      // no prefetch or background pass: the rehearsal ends with its reads
      startLayers: false,
      openLayer: (reader, o) => readLayerToc(reader, o),
      layer: { scheduler: new FetchScheduler() },
    });
    try {
      await withDeadline(
        opts.deadlineMs ?? 10_000,
        async (signal) => {
          const refDir = `/${encodeAlsRefName(`${host}/${REPO}:${TAG}`)}`;
          await store.vfs.getattr(refDir, { signal });
          for (const l of image.layers) {
            bytesRead += await lookUpLayer(store.vfs, `${refDir}/${l.digest}`, l.chunkedFile, { signal });
          }
        },
        { what: 'first-lookup rehearsal' },
      );
    } finally {
      await store.close();
    }
  } finally {
    await blobs?.close();
    await cache?.close();
    await registry.close();
    // a request cut short by the deadline must not keep the server (and the store's start) open
    served?.server.closeAllConnections();
    await new Promise((resolve) => (served ? served.server.close(resolve) : resolve(undefined)));
    await rm(root, { recursive: true, force: true });
  }
  return { ms: performance.now() - started, layers: image.layers.length, bytesRead };
}
