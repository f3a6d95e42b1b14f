import { StoreError } from '../util/errors.js';
import type { Platform } from './platform.js';
import { isValidDigest, type Digest } from '../util/digest.js';

export const MEDIA_OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const MEDIA_OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const MEDIA_DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
export const MEDIA_DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';
const MEDIA_DOCKER_SCHEMA1 = [
  'application/vnd.docker.distribution.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v1+prettyjws',
];

/** Sent on every manifest GET: registries 404 an OCI manifest when its type is not accepted. */
export const MANIFEST_ACCEPT = [
  MEDIA_OCI_INDEX,
  MEDIA_DOCKER_LIST,
  MEDIA_OCI_MANIFEST,
  MEDIA_DOCKER_MANIFEST,
].join(', ');

/** Annotations that name a layer's TOC (the ALS lookup key of containers/storage). */
export const ANNOTATION_STARGZ_TOC = 'containerd.io/snapshot/stargz/toc.digest';
export const ANNOTATION_ZSTD_CHECKSUM = 'io.containers.zstd-chunked.manifest-checksum';
export const ANNOTATION_ZSTD_CHECKSUM_LEGACY = 'io.github.containers.zstd-chunked.manifest-checksum';
export const ANNOTATION_ZSTD_POSITION = 'io.containers.zstd-chunked.manifest-position';
export const ANNOTATION_ZSTD_POSITION_LEGACY = 'io.github.containers.zstd-chunked.manifest-position';
/** Size of the uncompressed tar (eStargz writers; ctr-remote also sets it on zstd:chunked). */
export const ANNOTATION_UNCOMPRESSED_SIZE = 'io.containers.estargz.uncompressed-size';
export const TOC_ANNOTATIONS = [
  ANNOTATION_STARGZ_TOC,
  ANNOTATION_ZSTD_CHECKSUM,
  ANNOTATION_ZSTD_CHECKSUM_LEGACY,
];

export interface Descriptor {
  mediaType: string;
  digest: Digest;
  size: number;
  annotations: Record<string, string>;
  platform?: Platform;
  urls?: string[];
}

export interface ImageManifest {
  kind: 'manifest';
  mediaType: string;
  config: Descriptor;
  layers: Descriptor[];
  annotations: Record<string, string>;
}

export interface ImageIndex {
  kind: 'index';
  mediaType: string;
  manifests: Descriptor[];
  annotations: Record<string, string>;
}

export type ManifestDocument = ImageManifest | ImageIndex;

export interface ImageConfig {
  os?: string;
  architecture?: string;
  variant?: string;
  rootfs: { type: string; diff_ids: string[] };
  /** The whole parsed JSON (entrypoint, env, history ...). */
  raw: Record<string, unknown>;
}

function invalid(what: string, ctx: Record<string, string | number | undefined> = {}): StoreError {
  return new StoreError('E_MANIFEST', `invalid manifest: ${what}`, ctx);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function stringMap(v: unknown, what: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw invalid(`${what} is not an object`);
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== 'string') throw invalid(`${what}.${k} is not a string`);
    out[k] = val;
  }
  return out;
}

function parsePlatformField(v: unknown): Platform | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v) || typeof v.os !== 'string' || typeof v.architecture !== 'string') {
    throw invalid('platform needs os and architecture strings');
  }
  const p: Platform = { os: v.os, architecture: v.architecture };
  if (typeof v.variant === 'string' && v.variant !== '') p.variant = v.variant;
  return p;
}

export function parseDescriptor(v: unknown, what: string): Descriptor {
  if (!isObject(v)) throw invalid(`${what} is not an object`);
  const { mediaType, digest, size } = v;
  if (typeof mediaType !== 'string' || mediaType === '') throw invalid(`${what}.mediaType missing`);
  if (typeof digest !== 'string' || !isValidDigest(digest)) throw invalid(`${what}.digest invalid`);
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0)
    throw invalid(`${what}.size invalid`);
  const d: Descriptor = {
    mediaType,
    digest,
    size,
    annotations: stringMap(v.annotations, `${what}.annotations`),
  };
  const platform = parsePlatformField(v.platform);
  if (platform) d.platform = platform;
  if (Array.isArray(v.urls)) d.urls = v.urls.filter((u): u is string => typeof u === 'string');
  return d;
}

/**
 * Parse a manifest or index body. The kind comes from the body's `mediaType` field, else the HTTP
 * Content-Type, else the structure (images made by `podman import` carry no mediaType field).
 */
export function parseManifestDocument(body: Buffer, contentType?: string): ManifestDocument {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw invalid(`not JSON (${(err as Error).message.slice(0, 100)})`);
  }
  if (!isObject(json)) throw invalid('not a JSON object');
  const ct = contentType?.split(';')[0]?.trim().toLowerCase();
  const declared = typeof json.mediaType === 'string' ? json.mediaType : undefined;
  const mediaType = declared ?? (ct && ct !== 'application/json' ? ct : undefined);
  if (json.schemaVersion === 1 || (mediaType && MEDIA_DOCKER_SCHEMA1.includes(mediaType))) {
    throw new StoreError('E_MANIFEST', 'docker schema 1 manifests are not supported', { mediaType });
  }
  if (json.schemaVersion !== 2) throw invalid('schemaVersion is not 2');
  const isIndex =
    mediaType === MEDIA_OCI_INDEX ||
    mediaType === MEDIA_DOCKER_LIST ||
    (mediaType === undefined && 'manifests' in json);
  const annotations = stringMap(json.annotations, 'annotations');
  if (isIndex) {
    if (!Array.isArray(json.manifests)) throw invalid('index without manifests');
    return {
      kind: 'index',
      mediaType: mediaType ?? MEDIA_OCI_INDEX,
      manifests: json.manifests.map((m, i) => parseDescriptor(m, `manifests[${i}]`)),
      annotations,
    };
  }
  if (mediaType !== undefined && mediaType !== MEDIA_OCI_MANIFEST && mediaType !== MEDIA_DOCKER_MANIFEST) {
    throw new StoreError('E_MANIFEST', `unsupported manifest media type ${mediaType.slice(0, 100)}`, {
      mediaType,
    });
  }
  if (!Array.isArray(json.layers)) throw invalid('manifest without layers');
  return {
    kind: 'manifest',
    mediaType: mediaType ?? MEDIA_OCI_MANIFEST,
    config: parseDescriptor(json.config, 'config'),
    layers: json.layers.map((l, i) => parseDescriptor(l, `layers[${i}]`)),
    annotations,
  };
}

export function parseImageConfig(body: Buffer): ImageConfig {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new StoreError('E_MANIFEST', `image config is not JSON (${(err as Error).message.slice(0, 100)})`);
  }
  if (!isObject(json)) throw new StoreError('E_MANIFEST', 'image config is not a JSON object');
  const rootfs = json.rootfs;
  if (
    !isObject(rootfs) ||
    !Array.isArray(rootfs.diff_ids) ||
    !rootfs.diff_ids.every((d) => typeof d === 'string')
  ) {
    throw new StoreError('E_MANIFEST', 'image config has no rootfs.diff_ids');
  }
  const cfg: ImageConfig = {
    rootfs: {
      type: typeof rootfs.type === 'string' ? rootfs.type : 'layers',
      diff_ids: rootfs.diff_ids as string[],
    },
    raw: json,
  };
  if (typeof json.os === 'string') cfg.os = json.os;
  if (typeof json.architecture === 'string') cfg.architecture = json.architecture;
  if (typeof json.variant === 'string') cfg.variant = json.variant;
  return cfg;
}

/** The TOC-digest annotation of a layer descriptor, and which kind it is. */
export function tocAnnotation(
  d: Pick<Descriptor, 'annotations'>,
): { key: string; value: string } | undefined {
  for (const key of TOC_ANNOTATIONS) {
    const value = d.annotations[key];
    if (value !== undefined && value !== '') return { key, value };
  }
  return undefined;
}

/** `io.containers.estargz.uncompressed-size` when it is a valid byte count. */
export function uncompressedSizeAnnotation(d: Pick<Descriptor, 'annotations'>): number | undefined {
  const v = d.annotations[ANNOTATION_UNCOMPRESSED_SIZE];
  if (v === undefined || !/^\d{1,16}$/.test(v)) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : undefined;
}

/** TOC offset from `*.zstd-chunked.manifest-position` (`offset:length:ulength:type`). */
export function tocOffsetHint(d: Pick<Descriptor, 'annotations'>): number | undefined {
  const pos = d.annotations[ANNOTATION_ZSTD_POSITION] ?? d.annotations[ANNOTATION_ZSTD_POSITION_LEGACY];
  if (pos === undefined) return undefined;
  const fields = pos.split(':');
  if (fields.length !== 4) return undefined;
  const off = Number(fields[0]);
  return Number.isSafeInteger(off) && off >= 0 ? off : undefined;
}
