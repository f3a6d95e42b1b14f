import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { StoreError } from '../../src/util/errors.js';

/**
 * OCI image layouts written by hand (image-spec v1.0): blobs/sha256/<hex>, index.json with one
 * manifest per tag (`org.opencontainers.image.ref.name`), oci-layout. skopeo copies them to a registry
 * byte for byte (`--preserve-digests`), so layer annotations (TOC digests) survive.
 */

export const MT_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const MT_CONFIG = 'application/vnd.oci.image.config.v1+json';
export const MT_LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip';
export const MT_LAYER_ZSTD = 'application/vnd.oci.image.layer.v1.tar+zstd';

export interface LayerBlob {
  /** Compressed blob digest and size (what the manifest lists). */
  digest: string;
  size: number;
  mediaType: string;
  /** sha256 of the uncompressed tar (config rootfs.diff_ids). */
  diffID: string;
  annotations?: Record<string, string>;
}

export interface ImageSpec {
  cmd: string[];
  env: string[];
  workingDir?: string;
  entrypoint?: string[];
  /** Fixed creation time keeps configs (and so digests) reproducible. */
  created?: string;
}

export interface WrittenImage {
  manifestDigest: string;
  manifestSize: number;
  configDigest: string;
}

/** Passes bytes through while hashing them and counting them. */
export class HashCounter extends Transform {
  private readonly h = createHash('sha256');
  bytes = 0;
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.h.update(chunk);
    this.bytes += chunk.length;
    cb(null, chunk);
  }
  digest(): string {
    return 'sha256:' + this.h.digest('hex');
  }
}

export async function sha256File(path: string): Promise<{ digest: string; size: number }> {
  const h = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) {
    h.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { digest: 'sha256:' + h.digest('hex'), size };
}

export function blobPath(layout: string, digest: string): string {
  const [alg, hex] = digest.split(':');
  if (alg !== 'sha256' || !hex || !/^[0-9a-f]{64}$/.test(hex)) {
    throw new StoreError('E_INVALID_ARGUMENT', `bad digest ${digest}`, { digest });
  }
  return join(layout, 'blobs', 'sha256', hex);
}

export async function initLayout(layout: string): Promise<void> {
  await mkdir(join(layout, 'blobs', 'sha256'), { recursive: true });
  await writeFile(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
}

/** Move a finished file into the layout under its digest. */
export async function adoptBlob(layout: string, file: string, digest: string): Promise<string> {
  const dest = blobPath(layout, digest);
  await rename(file, dest);
  return dest;
}

export async function putBlobBytes(layout: string, bytes: Buffer): Promise<{ digest: string; size: number }> {
  const digest = 'sha256:' + createHash('sha256').update(bytes).digest('hex');
  await writeFile(blobPath(layout, digest), bytes);
  return { digest, size: bytes.length };
}

/** gzip a layer tar into the layout with node zlib (streaming); diffID and blob digest in one pass. */
export async function gzipLayerIntoLayout(layout: string, tarPath: string, level = 6): Promise<LayerBlob> {
  const tmp = join(layout, 'blobs', `.tmp-${process.pid}-${Date.now()}`);
  const raw = new HashCounter();
  const packed = new HashCounter();
  try {
    await pipeline(
      createReadStream(tarPath, { highWaterMark: 1 << 20 }),
      raw,
      createGzip({ level }),
      packed,
      createWriteStream(tmp),
    );
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  const digest = packed.digest();
  await adoptBlob(layout, tmp, digest);
  return { digest, size: packed.bytes, mediaType: MT_LAYER_GZIP, diffID: raw.digest() };
}

/** Config + manifest for `layers`, recorded in index.json under `tag` (replacing that tag). */
export async function writeImage(
  layout: string,
  tag: string,
  layers: readonly LayerBlob[],
  spec: ImageSpec,
): Promise<WrittenImage> {
  const created = spec.created ?? '2026-01-01T00:00:00Z';
  const config = {
    created,
    architecture: 'amd64',
    os: 'linux',
    config: {
      Env: spec.env,
      Cmd: spec.cmd,
      ...(spec.entrypoint ? { Entrypoint: spec.entrypoint } : {}),
      ...(spec.workingDir ? { WorkingDir: spec.workingDir } : {}),
    },
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffID) },
    history: layers.map((_, i) => ({ created, created_by: `sgz-bench layer ${i}` })),
  };
  const cfg = await putBlobBytes(layout, Buffer.from(JSON.stringify(config)));
  const manifest = {
    schemaVersion: 2,
    mediaType: MT_MANIFEST,
    config: { mediaType: MT_CONFIG, digest: cfg.digest, size: cfg.size },
    layers: layers.map((l) => ({
      mediaType: l.mediaType,
      digest: l.digest,
      size: l.size,
      ...(l.annotations && Object.keys(l.annotations).length > 0 ? { annotations: l.annotations } : {}),
    })),
  };
  const m = await putBlobBytes(layout, Buffer.from(JSON.stringify(manifest)));
  const indexPath = join(layout, 'index.json');
  let index: { schemaVersion: number; manifests: Array<{ annotations?: Record<string, string> }> } = {
    schemaVersion: 2,
    manifests: [],
  };
  try {
    index = JSON.parse(await readFile(indexPath, 'utf8')) as typeof index;
  } catch {
    // new layout
  }
  index.manifests = index.manifests.filter(
    (d) => d.annotations?.['org.opencontainers.image.ref.name'] !== tag,
  );
  index.manifests.push({
    mediaType: MT_MANIFEST,
    digest: m.digest,
    size: m.size,
    annotations: { 'org.opencontainers.image.ref.name': tag },
  } as (typeof index.manifests)[number]);
  await writeFile(indexPath, JSON.stringify(index));
  return { manifestDigest: m.digest, manifestSize: m.size, configDigest: cfg.digest };
}

export async function fileSize(path: string): Promise<number> {
  return (await stat(path)).size;
}
