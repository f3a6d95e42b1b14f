import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { Agent, request, type Dispatcher } from 'undici';
import type { Digest } from '../../src/util/digest.js';

/** Where and how to push: base URL (`http://127.0.0.1:5000`), optional auth header and TLS CA. */
export interface PushTarget {
  url: string;
  authorization?: string;
  ca?: string;
  /** client certificate and key (PEM) for registries that require mutual TLS */
  cert?: string;
  key?: string;
}

const agents = new Map<string, Dispatcher>();
function dispatcher(t: PushTarget): Dispatcher | undefined {
  if (!t.ca && !t.cert) return undefined;
  const k = `${t.ca ?? ''}|${t.cert ?? ''}`;
  let a = agents.get(k);
  if (!a) {
    a = new Agent({ connect: { ca: t.ca, cert: t.cert, key: t.key } });
    agents.set(k, a);
  }
  return a;
}

export function sha256(b: Buffer | string): Digest {
  return `sha256:${createHash('sha256').update(b).digest('hex')}` as Digest;
}

function headers(t: PushTarget, extra: Record<string, string> = {}): Record<string, string> {
  return t.authorization ? { ...extra, authorization: t.authorization } : extra;
}

async function startUpload(t: PushTarget, repo: string): Promise<URL> {
  const res = await request(`${t.url}/v2/${repo}/blobs/uploads/`, {
    method: 'POST',
    headers: headers(t),
    dispatcher: dispatcher(t),
  });
  const text = await res.body.text();
  if (res.statusCode !== 202)
    throw new Error(`upload start for ${repo}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
  const loc = res.headers.location;
  if (typeof loc !== 'string') throw new Error('upload start: no Location');
  return new URL(loc, t.url);
}

/** Monolithic blob upload (POST then PUT ?digest=). Returns the digest. */
export async function pushBlob(t: PushTarget, repo: string, data: Buffer): Promise<Digest> {
  const digest = sha256(data);
  const loc = await startUpload(t, repo);
  loc.searchParams.set('digest', digest);
  const res = await request(loc, {
    method: 'PUT',
    headers: headers(t, {
      'content-type': 'application/octet-stream',
      'content-length': String(data.length),
    }),
    body: data,
    dispatcher: dispatcher(t),
  });
  const text = await res.body.text();
  if (res.statusCode !== 201)
    throw new Error(`blob PUT ${repo}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
  return digest;
}

/** Upload a (large) file as one blob, streaming it; `digest` must be known in advance. */
export async function pushBlobFile(t: PushTarget, repo: string, path: string, digest: string): Promise<void> {
  const { size } = await stat(path);
  const loc = await startUpload(t, repo);
  loc.searchParams.set('digest', digest);
  const res = await request(loc, {
    method: 'PUT',
    headers: headers(t, { 'content-type': 'application/octet-stream', 'content-length': String(size) }),
    body: createReadStream(path, { highWaterMark: 1 << 20 }),
    dispatcher: dispatcher(t),
  });
  const text = await res.body.text();
  if (res.statusCode !== 201)
    throw new Error(`blob PUT ${repo}: HTTP ${res.statusCode} ${text.slice(0, 200)}`);
}

/** PUT a manifest or index under a tag or digest. Returns the digest of the exact bytes sent. */
export async function pushManifest(
  t: PushTarget,
  repo: string,
  reference: string,
  body: Buffer | object,
  mediaType: string,
): Promise<Digest> {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
  const res = await request(`${t.url}/v2/${repo}/manifests/${reference}`, {
    method: 'PUT',
    headers: headers(t, { 'content-type': mediaType }),
    body: bytes,
    dispatcher: dispatcher(t),
  });
  const text = await res.body.text();
  if (res.statusCode !== 201)
    throw new Error(`manifest PUT ${repo}:${reference}: HTTP ${res.statusCode} ${text.slice(0, 300)}`);
  return sha256(bytes);
}

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const OCI_CONFIG = 'application/vnd.oci.image.config.v1+json';
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';
export const DOCKER_CONFIG = 'application/vnd.docker.container.image.v1+json';
export const LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip';

export interface PushedImage {
  manifestDigest: Digest;
  manifest: Record<string, unknown>;
  manifestBytes: Buffer;
  configDigest: Digest;
  layers: Array<{ digest: Digest; size: number; data: Buffer }>;
}

/**
 * Push a single-platform image: the given layer blobs (any bytes), a config with matching
 * diff_ids placeholders, and an OCI (or docker schema2) manifest under `tag`.
 */
export async function pushImage(
  t: PushTarget,
  repo: string,
  tag: string,
  layers: Array<{ data: Buffer; mediaType?: string; annotations?: Record<string, string> }>,
  opts: {
    os?: string;
    architecture?: string;
    variant?: string;
    docker?: boolean;
    configExtra?: Record<string, unknown>;
  } = {},
): Promise<PushedImage> {
  const pushed: PushedImage['layers'] = [];
  for (const l of layers)
    pushed.push({ digest: await pushBlob(t, repo, l.data), size: l.data.length, data: l.data });
  const config = Buffer.from(
    JSON.stringify({
      architecture: opts.architecture ?? 'amd64',
      os: opts.os ?? 'linux',
      ...(opts.variant ? { variant: opts.variant } : {}),
      rootfs: { type: 'layers', diff_ids: layers.map((l) => sha256(l.data)) },
      config: {},
      ...opts.configExtra,
    }),
  );
  const configDigest = await pushBlob(t, repo, config);
  const manifest = {
    schemaVersion: 2,
    mediaType: opts.docker ? DOCKER_MANIFEST : OCI_MANIFEST,
    config: {
      mediaType: opts.docker ? DOCKER_CONFIG : OCI_CONFIG,
      digest: configDigest,
      size: config.length,
    },
    layers: layers.map((l, i) => ({
      mediaType: l.mediaType ?? LAYER_GZIP,
      digest: pushed[i]!.digest,
      size: l.data.length,
      ...(l.annotations ? { annotations: l.annotations } : {}),
    })),
  };
  const manifestBytes = Buffer.from(JSON.stringify(manifest));
  const manifestDigest = await pushManifest(t, repo, tag, manifestBytes, manifest.mediaType);
  return { manifestDigest, manifest, manifestBytes, configDigest, layers: pushed };
}
