import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { gzip, gunzip } from 'node:zlib';
import { decompress as zstdDecompress } from 'zstd-napi';
import tarStream from 'tar-stream';
import { buildLayerBuffer } from '../../src/format/writer/index.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader, type RangeReader } from '../../src/util/range-reader.js';
import type {
  CreateLayerArgs,
  CreateLayerFn,
  LayerMatch,
  LazyLayerLike,
  StoreRegistry,
} from '../../src/store/deps.js';
import { matchLayer, type LayerDescriptor } from '../../src/registry/layer-match.js';
import type { LayerRecord } from '../../src/store/record.js';
import type { Descriptor } from '../../src/registry/manifest.js';
import type { Digest } from '../../src/util/digest.js';
import type { ImageRef } from '../../src/registry/reference.js';

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

/**
 * Decompress a whole layer blob in one call, bypassing the store's chunked codec: zlib for gzip,
 * zstd-napi's one-shot decompress (every frame, skippable ones ignored) for zstd.
 */
export async function decompressBlob(blob: Buffer, zstd: boolean): Promise<Buffer> {
  if (!zstd) return await gunzipAsync(blob);
  return zstdDecompress(blob);
}
export const sha256 = (b: Buffer | string) =>
  ('sha256:' + createHash('sha256').update(b).digest('hex')) as Digest;

export interface TarEntry {
  name: string;
  type?: 'file' | 'directory' | 'symlink' | 'link' | 'character-device' | 'fifo';
  content?: Buffer | string;
  mode?: number;
  uid?: number;
  gid?: number;
  mtime?: Date;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
  pax?: Record<string, string>;
}

/** A tar built with tar-stream (not our writer), so fixtures do not depend on the code under test. */
export async function makeTar(entries: TarEntry[]): Promise<Buffer> {
  const pack = tarStream.pack();
  const parts: Buffer[] = [];
  pack.on('data', (b: unknown) => {
    parts.push(b as Buffer);
  });
  const done = new Promise<void>((resolve, reject) => {
    pack.on('end', () => resolve());
    pack.on('error', reject);
  });
  for (const e of entries) {
    const type = e.type ?? 'file';
    const body = e.content === undefined ? undefined : Buffer.from(e.content);
    const header: Partial<tarStream.Header> & { name: string } = {
      name: e.name,
      type,
      mode: e.mode ?? (type === 'directory' ? 0o755 : 0o644),
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      mtime: e.mtime ?? new Date(1_600_000_000_000),
    };
    if (e.linkname !== undefined) header.linkname = e.linkname;
    if (e.devmajor !== undefined) header.devmajor = e.devmajor;
    if (e.devminor !== undefined) header.devminor = e.devminor;
    if (e.pax) header.pax = e.pax;
    await new Promise<void>((resolve, reject) => {
      const cb = (err?: Error | null) => (err ? reject(err) : resolve());
      if (type === 'file') pack.entry(header, body ?? Buffer.alloc(0), cb);
      else pack.entry(header, cb);
    });
  }
  pack.finalize();
  await done;
  return Buffer.concat(parts);
}

export type LayerKind = 'estargz' | 'zstd:chunked' | 'gzip';

export interface BuiltLayer {
  blob: Buffer;
  descriptor: Descriptor;
  diffId: string;
  /** TOC digest annotation value (lazy formats only). */
  tocDigest?: string;
  uncompressedSize: number;
}

export interface BuiltImage {
  layers: BuiltLayer[];
  config: Buffer;
  configDigest: string;
  manifest: Buffer;
  manifestDigest: string;
}

export async function buildTestLayer(
  tar: Buffer,
  kind: LayerKind,
  prioritize?: string[],
  chunkSize?: number,
): Promise<BuiltLayer> {
  // DiffID and uncompressed size come from the input tar itself (independent of the writer)
  const diffId = sha256(tar);
  if (kind === 'gzip') {
    const blob = await gzipAsync(tar);
    return {
      blob,
      diffId,
      uncompressedSize: tar.length,
      descriptor: {
        mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
        digest: sha256(blob),
        size: blob.length,
        annotations: {},
      },
    };
  }
  const r = await buildLayerBuffer(tar, {
    format: kind,
    ...(prioritize ? { prioritize } : {}),
    ...(chunkSize !== undefined ? { chunkSize } : {}),
  });
  const plain = await decompressBlob(r.blob, kind === 'zstd:chunked');
  if (sha256(plain) !== r.diffID)
    throw new Error(`writer DiffID ${r.diffID} differs from the decompressed blob`);
  return {
    blob: r.blob,
    diffId: sha256(plain),
    tocDigest: r.tocDigest,
    uncompressedSize: plain.length,
    descriptor: {
      mediaType: r.mediaType,
      digest: sha256(r.blob),
      size: r.blob.length,
      annotations: { ...r.annotations },
    },
  };
}

export function assembleImage(layers: BuiltLayer[], extraConfig: Record<string, unknown> = {}): BuiltImage {
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'], ...extraConfig },
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: {
        mediaType: 'application/vnd.oci.image.config.v1+json',
        digest: sha256(config),
        size: config.length,
      },
      layers: layers.map((l) => {
        const d: Record<string, unknown> = {
          mediaType: l.descriptor.mediaType,
          digest: l.descriptor.digest,
          size: l.descriptor.size,
        };
        if (Object.keys(l.descriptor.annotations).length > 0) d.annotations = l.descriptor.annotations;
        return d;
      }),
    }),
  );
  return { layers, config, configDigest: sha256(config), manifest, manifestDigest: sha256(manifest) };
}

/** Push an image to a registry with the plain distribution API (monolithic uploads). */
export async function pushImage(
  registryUrl: string,
  repo: string,
  tag: string,
  img: BuiltImage,
): Promise<void> {
  const blobs: Array<[string, Buffer]> = [
    [img.configDigest, img.config],
    ...img.layers.map((l) => [l.descriptor.digest, l.blob] as [string, Buffer]),
  ];
  for (const [digest, data] of blobs) {
    const head = await fetch(`${registryUrl}/v2/${repo}/blobs/${digest}`, { method: 'HEAD' });
    if (head.status === 200) continue;
    const start = await fetch(`${registryUrl}/v2/${repo}/blobs/uploads/`, { method: 'POST' });
    if (start.status !== 202) throw new Error(`upload start ${start.status}`);
    const loc = new URL(start.headers.get('location')!, registryUrl);
    loc.searchParams.set('digest', digest);
    const put = await fetch(loc, {
      method: 'PUT',
      body: data,
      headers: { 'content-type': 'application/octet-stream' },
    });
    if (put.status !== 201) throw new Error(`blob put ${put.status}: ${await put.text()}`);
  }
  const res = await fetch(`${registryUrl}/v2/${repo}/manifests/${tag}`, {
    method: 'PUT',
    body: img.manifest,
    headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
  });
  if (res.status !== 201) throw new Error(`manifest put ${res.status}: ${await res.text()}`);
}

/** In-memory StoreRegistry for unit tests: counts requests, can be told to hang. */
export class FakeRegistry implements StoreRegistry {
  readonly images_ = new Map<string, BuiltImage>();
  readonly blobs = new Map<string, Buffer>();
  imageCalls = 0;
  blobOpens = 0;
  bytesRead = 0;
  /** References whose requests never answer (until aborted). */
  readonly hangRefs = new Set<string>();
  /** Every request fails at once like an unreachable registry. */
  down = false;
  /** Blob reads (of already opened blobs) never answer until aborted. */
  hangReads = false;
  /** findLayer waits for this after the manifest (as the image config fetch would). */
  configGate: Promise<void> | undefined;
  /** Called with every blob read as it starts. */
  onRead: ((digest: string, offset: number, length: number) => void) | undefined;

  set(ref: string, img: BuiltImage): void {
    this.images_.set(ref, img);
    for (const l of img.layers) this.blobs.set(l.descriptor.digest, l.blob);
  }

  private async maybeHang(ref: string, signal: AbortSignal): Promise<void> {
    if (this.down) throw new StoreError('E_REGISTRY_NETWORK', 'connection refused (registry down)', { ref });
    if (!this.hangRefs.has(ref)) return;
    await new Promise((_, reject) =>
      signal.addEventListener('abort', () => reject(new StoreError('E_ABORTED', 'aborted'))),
    );
  }

  async findLayer(
    image: ImageRef | string,
    digest: string,
    signal: AbortSignal,
    onManifest?: (layers: readonly LayerDescriptor[]) => void,
  ): Promise<LayerMatch> {
    const ref = String(image);
    this.imageCalls++;
    await this.maybeHang(ref, signal);
    const img = this.images_.get(ref);
    if (!img) throw new StoreError('E_REGISTRY_NOT_FOUND', 'manifest unknown', { ref });
    onManifest?.(img.layers.map((l) => l.descriptor));
    if (this.configGate) await this.configGate;
    const hit = matchLayer(
      img.layers.map((l) => l.descriptor),
      digest,
    );
    if (!hit) throw new StoreError('E_NOT_FOUND', 'layer not in image', { ref, digest });
    return {
      manifestDigest: img.manifestDigest,
      configDigest: img.configDigest,
      descriptor: hit.descriptor,
      matchedBy: hit.matchedBy,
      diffId: img.layers[hit.layerIndex]!.diffId,
      layers: img.layers.map((l) => ({ descriptor: l.descriptor, diffId: l.diffId })),
    };
  }

  async openBlob(
    image: ImageRef | string,
    digest: string,
    size: number,
    signal: AbortSignal,
  ): Promise<RangeReader> {
    const ref = String(image);
    this.blobOpens++;
    await this.maybeHang(ref, signal);
    const b = this.blobs.get(digest);
    if (!b || b.length !== size) throw new StoreError('E_REGISTRY_NOT_FOUND', 'blob unknown', { digest });
    const inner = new BufferRangeReader(b);
    const count = (n: number) => {
      this.bytesRead += n;
    };
    const state = () => ({ down: this.down, hang: this.hangReads });
    const onRead = (offset: number, length: number) => this.onRead?.(digest, offset, length);
    return {
      size: b.length,
      async read(offset: number, length: number, sig?: AbortSignal) {
        const st = state();
        if (st.down)
          throw new StoreError('E_REGISTRY_NETWORK', 'connection refused (registry down)', { digest });
        if (st.hang) {
          await new Promise((_, reject) => {
            if (sig?.aborted) reject(new StoreError('E_ABORTED', 'aborted'));
            sig?.addEventListener('abort', () => reject(new StoreError('E_ABORTED', 'aborted')));
          });
        }
        onRead(offset, length);
        count(length);
        return inner.read(offset, length);
      },
    };
  }
}

/** The store's edge-case layer (stargz-format.md §9.3 items 13-15 + hardlinks, xattrs, devices). */
export async function edgeCaseTar(): Promise<Buffer> {
  const big = Buffer.alloc(5 * 1024 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 13)) & 0xff;
  return await makeTar([
    { name: 'foo/', type: 'directory', mode: 0o755 },
    {
      name: 'foo/bar.txt',
      content: 'bar content\n',
      mode: 0o640,
      uid: 1000,
      gid: 1001,
      mtime: new Date('2020-01-02T03:04:05Z'),
    },
    { name: 'foo/.wh.gone' },
    { name: 'foo/.prefetch.landmark', content: 'visible in a subdirectory' },
    { name: 'foo/hard', type: 'link', linkname: 'foo/bar.txt' },
    { name: 'foo/link', type: 'symlink', linkname: 'bar.txt' },
    { name: 'opq/', type: 'directory' },
    { name: 'opq/.wh..wh..opq' },
    { name: 'opq/kept', content: 'kept\n' },
    { name: 'dev/', type: 'directory' },
    { name: 'dev/tty9', type: 'character-device', devmajor: 4, devminor: 9, mode: 0o620 },
    { name: 'dev/fifo', type: 'fifo' },
    { name: 'x/', type: 'directory', mode: 0o700 },
    { name: 'x/xattr-file', content: 'x', pax: { 'SCHILY.xattr.user.k': 'v' } },
    { name: 'big.bin', content: big },
  ]);
}

export interface CountingProxy {
  host: string;
  /** When true, requests are accepted but never answered. */
  hang: boolean;
  /** When true, connections are dropped as soon as a request arrives (a registry that is down). */
  down: boolean;
  /** Response body bytes forwarded for blob GETs, and the requests seen. */
  blobBytes: number;
  /** Blob bytes forwarded per blob digest. */
  bytesByDigest: Map<string, number>;
  requests: string[];
  stop(): Promise<void>;
}

/**
 * An HTTP proxy in front of a registry on 127.0.0.1 that counts blob bytes and can be switched to
 * "hang" (accept, never answer) to simulate a stuck registry.
 */
export async function startCountingProxy(targetHost: string): Promise<CountingProxy> {
  const http = await import('node:http');
  const sockets = new Set<import('node:net').Socket>();
  const state: CountingProxy = {
    host: '',
    hang: false,
    down: false,
    blobBytes: 0,
    bytesByDigest: new Map(),
    requests: [],
    stop: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const [thost, tport] = targetHost.split(':');
  const server = http.createServer((req, res) => {
    state.requests.push(`${req.method} ${req.url} ${req.headers.range ?? ''}`.trim());
    if (state.down) {
      req.socket.destroy();
      return;
    }
    if (state.hang) return; // never answer
    const up = http.request(
      {
        host: thost,
        port: Number(tport),
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: targetHost },
      },
      (ur) => {
        res.writeHead(ur.statusCode ?? 502, ur.headers);
        const m = /\/blobs\/(sha256:[a-f0-9]{64})/.exec(req.url ?? '');
        ur.on('data', (b: Buffer) => {
          if (m) {
            state.blobBytes += b.length;
            state.bytesByDigest.set(m[1]!, (state.bytesByDigest.get(m[1]!) ?? 0) + b.length);
          }
          res.write(b);
        });
        ur.on('end', () => res.end());
      },
    );
    up.on('error', () => {
      res.writeHead(502);
      res.end();
    });
    req.pipe(up);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const addr = server.address();
  state.host = `127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
  return state;
}

/**
 * `inner`'s layers with some members replaced (spies on start, close...). The methods a layer
 * class keeps on its prototype are bound here, since spreading copies own fields only.
 */
export function patchLayers(
  inner: CreateLayerFn,
  patch: (args: CreateLayerArgs, layer: LazyLayerLike) => Partial<LazyLayerLike>,
): CreateLayerFn {
  return (args) => {
    const l = inner(args);
    return { ...l, read: (...a) => l.read(...a), state: () => l.state(), ...patch(args, l) };
  };
}

/** A saved layer record as the resolver writes it (fields other than the arguments are fixed). */
export function layerRecord(
  ref: string,
  digest: string,
  blobDigest: string,
  blobSize: number,
  more: Partial<LayerRecord> = {},
): LayerRecord {
  const d = (c: string): string => `sha256:${c.repeat(64)}`;
  return {
    version: 1,
    ref,
    digest,
    matchedBy: 'blob',
    blobDigest,
    blobSize,
    mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
    compression: 'gzip',
    format: 'estargz',
    tocDigest: d('e'),
    tocAnnotation: 'containerd.io/snapshot/stargz/toc.digest',
    diffId: d('f'),
    diffSize: 10,
    diffSizeSource: 'annotation',
    resolvedAt: new Date(0).toISOString(),
    ...more,
  };
}
