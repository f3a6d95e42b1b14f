import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { execFileSync } from 'node:child_process';
import { pack as tarPack, type Header } from 'tar-stream';
import { buildLayerBuffer, type BuildOptions } from '../../src/format/writer/index.js';
import { runCommand, withPrivateBlobInfoCache } from './podman.js';
import { pushBlob, pushManifest } from './push.js';
import { parseDigest, type Digest } from '../../src/util/digest.js';

/**
 * Build runnable OCI images for end-to-end tests: a busybox-static base layer (+ data files),
 * layers encoded by our writer (eStargz, zstd:chunked) or plain gzip, an OCI image layout on disk,
 * pushed to a test registry with skopeo and checked there (digests and annotations unchanged).
 */

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const OCI_CONFIG = 'application/vnd.oci.image.config.v1+json';
export const OCI_LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip';
const BUSYBOX = '/bin/busybox';
const gzipAsync = promisify(gzip);

export function sha256(b: Buffer | string): Digest {
  return ('sha256:' + createHash('sha256').update(b).digest('hex')) as Digest;
}

export interface TarFile {
  /** Path inside the layer, e.g. 'data/file' (no leading '/'). */
  path: string;
  type?: 'file' | 'directory' | 'symlink' | 'link';
  content?: Buffer | string;
  mode?: number;
  /** Symlink target, or hardlink target path. */
  linkname?: string;
  uid?: number;
  gid?: number;
  mtime?: Date;
}

const FIXED_MTIME = new Date('2024-01-02T03:04:05Z');

/** A tar (written with tar-stream) holding `files` in order. */
export async function makeTar(files: TarFile[]): Promise<Buffer> {
  const pack = tarPack();
  const chunks: Buffer[] = [];
  pack.on('data', (b: unknown) => chunks.push(b as Buffer));
  const done = new Promise<void>((resolve, reject) => {
    pack.on('end', resolve);
    pack.on('error', reject);
  });
  for (const f of files) {
    const type = f.type ?? 'file';
    const content = f.content === undefined ? Buffer.alloc(0) : Buffer.from(f.content);
    const header: Partial<Header> & { name: string } = {
      name: f.path,
      type,
      mode: f.mode ?? (type === 'directory' ? 0o755 : type === 'symlink' ? 0o777 : 0o644),
      mtime: f.mtime ?? FIXED_MTIME,
      uid: f.uid ?? 0,
      gid: f.gid ?? 0,
      ...(f.linkname !== undefined ? { linkname: f.linkname } : {}),
      ...(type === 'file' ? { size: content.length } : {}),
    };
    await new Promise<void>((resolve, reject) => {
      const cb = (err?: Error | null): void => (err ? reject(err) : resolve());
      if (type === 'file') pack.entry(header, content, cb);
      else pack.entry(header, cb);
    });
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Applets of the host's busybox-static (`busybox --list`); fails loudly when it is missing. */
export function busyboxApplets(): string[] {
  const out = execFileSync(BUSYBOX, ['--list']).toString();
  return out
    .split('\n')
    .map((s) => s.trim())
    .filter((s) => s !== '' && s !== 'busybox' && !s.includes('/'));
}

/**
 * Base layer: /bin/busybox plus a symlink per applet in /bin (sh, cat, ls, true, sleep,
 * sha256sum, ...), /etc/passwd, /etc/group, /tmp, then `extra` files.
 */
export async function busyboxLayerTar(extra: TarFile[] = []): Promise<Buffer> {
  const busybox = await readFile(BUSYBOX);
  const files: TarFile[] = [
    { path: 'bin/', type: 'directory' },
    { path: 'bin/busybox', content: busybox, mode: 0o755 },
    ...busyboxApplets().map((a): TarFile => ({ path: `bin/${a}`, type: 'symlink', linkname: 'busybox' })),
    { path: 'etc/', type: 'directory' },
    { path: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\n' },
    { path: 'etc/group', content: 'root:x:0:\n' },
    { path: 'root/', type: 'directory', mode: 0o700 },
    { path: 'tmp/', type: 'directory', mode: 0o1777 },
    ...extra,
  ];
  return await makeTar(files);
}

export type LayerEncoding = 'estargz' | 'zstd:chunked' | 'gzip';

export interface Descriptor {
  mediaType: string;
  digest: Digest;
  size: number;
  annotations?: Record<string, string>;
}

export interface EncodedLayer {
  encoding: LayerEncoding;
  blob: Buffer;
  descriptor: Descriptor;
  diffID: string;
  /** TOC digest (ALS key) for our lazy formats. */
  tocDigest?: string;
}

/** Encode a layer tar: our writer for eStargz / zstd:chunked, Node's gzip for plain gzip. */
export async function encodeLayer(
  tar: Buffer,
  encoding: LayerEncoding,
  opts: Omit<BuildOptions, 'format'> = {},
): Promise<EncodedLayer> {
  if (encoding === 'gzip') {
    const blob = await gzipAsync(tar);
    return {
      encoding,
      blob,
      descriptor: { mediaType: OCI_LAYER_GZIP, digest: sha256(blob), size: blob.length },
      diffID: sha256(tar),
    };
  }
  const r = await buildLayerBuffer(tar, { ...opts, format: encoding });
  return {
    encoding,
    blob: r.blob,
    descriptor: {
      mediaType: r.mediaType,
      digest: parseDigest(r.blobDigest),
      size: r.size,
      annotations: r.annotations,
    },
    diffID: r.diffID,
    tocDigest: r.tocDigest,
  };
}

export interface ImageConfigOptions {
  cmd?: string[];
  entrypoint?: string[];
  env?: string[];
}

export interface OciImage {
  manifest: Record<string, unknown>;
  manifestBytes: Buffer;
  manifestDigest: Digest;
  configBytes: Buffer;
  configDigest: Digest;
  layers: Descriptor[];
  diffIDs: string[];
  blobs: Map<string, Buffer>;
}

function hostArch(): string {
  const map: Record<string, string> = {
    x64: 'amd64',
    arm64: 'arm64',
    arm: 'arm',
    ppc64: 'ppc64le',
    s390x: 's390x',
  };
  return map[process.arch] ?? process.arch;
}

/** Config + manifest for `layers` (in order, base first). */
export function assembleImage(layers: EncodedLayer[], cfg: ImageConfigOptions = {}): OciImage {
  const config = {
    created: FIXED_MTIME.toISOString(),
    architecture: hostArch(),
    os: 'linux',
    config: {
      Env: cfg.env ?? ['PATH=/bin:/usr/bin:/sbin:/usr/sbin'],
      ...(cfg.entrypoint ? { Entrypoint: cfg.entrypoint } : {}),
      Cmd: cfg.cmd ?? ['/bin/sh'],
    },
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffID) },
  };
  const configBytes = Buffer.from(JSON.stringify(config));
  const configDigest = sha256(configBytes);
  const manifest = {
    schemaVersion: 2,
    mediaType: OCI_MANIFEST,
    config: { mediaType: OCI_CONFIG, digest: configDigest, size: configBytes.length },
    layers: layers.map((l) => l.descriptor),
  };
  const manifestBytes = Buffer.from(JSON.stringify(manifest));
  const blobs = new Map<string, Buffer>([[configDigest, configBytes]]);
  for (const l of layers) blobs.set(l.descriptor.digest, l.blob);
  return {
    manifest,
    manifestBytes,
    manifestDigest: sha256(manifestBytes),
    configBytes,
    configDigest,
    layers: layers.map((l) => l.descriptor),
    diffIDs: layers.map((l) => l.diffID),
    blobs,
  };
}

/** Write an OCI image layout (oci-layout, index.json, blobs/sha256/...) with `image` tagged `tag`. */
export async function writeOciLayout(dir: string, image: OciImage, tag: string): Promise<void> {
  const blobDir = join(dir, 'blobs', 'sha256');
  await mkdir(blobDir, { recursive: true });
  await writeFile(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const all = new Map(image.blobs);
  all.set(image.manifestDigest, image.manifestBytes);
  for (const [digest, data] of all) await writeFile(join(blobDir, digest.slice('sha256:'.length)), data);
  const index = {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests: [
      {
        mediaType: OCI_MANIFEST,
        digest: image.manifestDigest,
        size: image.manifestBytes.length,
        annotations: { 'org.opencontainers.image.ref.name': tag },
      },
    ],
  };
  await writeFile(join(dir, 'index.json'), JSON.stringify(index));
}

export interface RegistryManifest {
  bytes: Buffer;
  digest: Digest;
  json: { layers: Descriptor[]; config: Descriptor; mediaType?: string };
  contentType: string | null;
}

/** GET a manifest from a plain-HTTP registry (with the OCI Accept header: lab NOTES §1). */
export async function fetchManifest(
  registry: string,
  repo: string,
  reference: string,
): Promise<RegistryManifest> {
  const res = await fetch(`http://${registry}/v2/${repo}/manifests/${reference}`, {
    headers: { accept: OCI_MANIFEST },
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  if (res.status !== 200)
    throw new Error(
      `GET manifest ${repo}:${reference}: HTTP ${res.status} ${bytes.toString().slice(0, 200)}`,
    );
  return {
    bytes,
    digest: sha256(bytes),
    json: JSON.parse(bytes.toString()) as RegistryManifest['json'],
    contentType: res.headers.get('content-type'),
  };
}

export interface PushedImage {
  /** `<registry>/<repo>:<tag>` */
  ref: string;
  /** `<registry>/<repo>@<manifestDigest>` */
  digestRef: string;
  manifestDigest: Digest;
  configDigest: Digest;
  layers: Descriptor[];
  diffIDs: string[];
}

/**
 * Push an OCI layout with skopeo (`--preserve-digests`, private blob-info-cache so no other
 * compression of the same DiffID can be substituted), then check the registry's manifest is
 * byte-identical: same digest, same layer digests, same annotations.
 */
export async function pushOciLayout(
  layoutDir: string,
  tag: string,
  registry: string,
  repo: string,
  image: OciImage,
): Promise<PushedImage> {
  const cache = await mkdtemp(join(tmpdir(), 'sgz-skopeo-cache-'));
  try {
    const argv = withPrivateBlobInfoCache(
      [
        'skopeo',
        'copy',
        '--quiet',
        '--preserve-digests',
        '--dest-tls-verify=false',
        `oci:${layoutDir}:${tag}`,
        `docker://${registry}/${repo}:${tag}`,
      ],
      cache,
    );
    const r = await runCommand(argv, { timeoutMs: 5 * 60_000 });
    if (r.code !== 0) throw new Error(`skopeo copy failed (code ${r.code}): ${r.stderr.slice(-2000)}`);
  } finally {
    await rm(cache, { recursive: true, force: true });
  }
  const pushed = await fetchManifest(registry, repo, tag);
  if (pushed.digest !== image.manifestDigest) {
    throw new Error(
      `registry manifest digest ${pushed.digest} != built ${image.manifestDigest} (skopeo rewrote it)`,
    );
  }
  const want = JSON.stringify(image.layers);
  const got = JSON.stringify(pushed.json.layers);
  if (want !== got) throw new Error(`registry layers differ from the built ones:\n${got}\n!=\n${want}`);
  return {
    ref: `${registry}/${repo}:${tag}`,
    digestRef: `${registry}/${repo}@${image.manifestDigest}`,
    manifestDigest: image.manifestDigest,
    configDigest: image.configDigest,
    layers: image.layers,
    diffIDs: image.diffIDs,
  };
}

export interface BuildAndPushOptions extends ImageConfigOptions {
  /** host:port of the registry (plain HTTP). */
  registry: string;
  repo: string;
  tag: string;
  layers: EncodedLayer[];
}

/** assembleImage + writeOciLayout (temp dir) + pushOciLayout. */
export async function buildAndPushImage(opts: BuildAndPushOptions): Promise<PushedImage> {
  const image = assembleImage(opts.layers, opts);
  const dir = await mkdtemp(join(tmpdir(), 'sgz-oci-'));
  try {
    await writeOciLayout(dir, image, opts.tag);
    return await pushOciLayout(dir, opts.tag, opts.registry, opts.repo, image);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Push `image` with the plain distribution API (no skopeo: quicker when a test pushes many
 * images). `registry` is host:port over plain HTTP; `authorization` an Authorization header value.
 * Returns the tag reference.
 */
export async function pushImageHttp(
  registry: string,
  repo: string,
  tag: string,
  image: OciImage,
  authorization?: string,
): Promise<string> {
  const target = { url: `http://${registry}`, ...(authorization !== undefined ? { authorization } : {}) };
  for (const data of image.blobs.values()) await pushBlob(target, repo, data);
  await pushManifest(target, repo, tag, image.manifestBytes, OCI_MANIFEST);
  return `${registry}/${repo}:${tag}`;
}
