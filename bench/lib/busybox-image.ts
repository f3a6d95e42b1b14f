/**
 * Build a runnable busybox-based OCI image from a list of files, encode its layers with our writer
 * (or plain gzip) and push it with skopeo to a plain-HTTP registry.
 *
 *   node dist/bench/lib/busybox-image.js --registry 127.0.0.1:5000 --repo demo/app --tag estargz \
 *     --format estargz|zstd:chunked|gzip [--file SRC[:DEST]]... [--cmd '["/bin/sh","-c","..."]'] \
 *     [--env K=V]... [--workdir /] [--prioritize /path]... [--chunk-size BYTES] [--work-dir DIR]
 *
 * Layer 1: /bin/busybox (static) with a symlink per applet, /etc/passwd, /etc/group, /tmp, /root.
 * Layer 2: the given files (DEST defaults to /data/<basename of SRC>; directories are copied whole).
 * Prints one JSON line: {"ref", "manifestDigest", "layers":[{digest,size,mediaType,tocDigest?}]}.
 */
import { chmod, cp, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { StoreError, isStoreError } from '../../src/util/errors.js';
import { gzipLayerIntoLayout, initLayout, writeImage, type LayerBlob } from './oci.js';
import { run } from './proc.js';
import { skopeoPushLayout } from './push.js';
import { createLayerTar } from './tarball.js';
import { writerLayerIntoLayout } from './writer.js';

export type ImageFormat = 'gzip' | 'estargz' | 'zstd:chunked';

export interface ImageFile {
  /** Host path (file or directory). */
  src: string;
  /** Absolute path in the image. */
  dest: string;
}

export interface BusyboxImageOptions {
  /** host:port, plain HTTP. */
  registry: string;
  repo: string;
  tag: string;
  format: ImageFormat;
  files: ImageFile[];
  cmd?: string[];
  env?: string[];
  workingDir?: string;
  /** Image paths to put first in the lazy layers (eStargz/zstd:chunked prefetch). */
  prioritize?: string[];
  chunkSize?: number;
  /** Scratch directory (default: a fresh temp dir, removed afterwards). */
  workDir?: string;
  busybox?: string;
}

export interface BusyboxImageResult {
  ref: string;
  manifestDigest: string;
  layers: Array<{ digest: string; size: number; mediaType: string; tocDigest?: string }>;
}

export const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Parse "SRC[:DEST]" (DEST absolute; default /data/<basename>). Pure. */
export function parseFileSpec(spec: string): ImageFile {
  const i = spec.lastIndexOf(':/');
  const src = i > 0 ? spec.slice(0, i) : spec;
  const dest = i > 0 ? spec.slice(i + 1) : `/data/${basename(src)}`;
  if (!src || !dest.startsWith('/') || dest === '/' || dest.split('/').includes('..')) {
    throw new StoreError('E_INVALID_ARGUMENT', `bad --file "${spec}" (want SRC[:/abs/dest])`, { path: spec });
  }
  return { src, dest };
}

async function busyboxTree(dir: string, busybox: string): Promise<void> {
  await mkdir(join(dir, 'bin'), { recursive: true });
  await cp(busybox, join(dir, 'bin/busybox'));
  await chmod(join(dir, 'bin/busybox'), 0o755);
  const list = await run(busybox, ['--list']);
  for (const applet of list.stdout.split('\n').map((s) => s.trim())) {
    if (!applet || applet === 'busybox' || applet.includes('/')) continue;
    await symlink('busybox', join(dir, 'bin', applet));
  }
  await mkdir(join(dir, 'etc'), { recursive: true });
  await writeFile(
    join(dir, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n',
  );
  await writeFile(join(dir, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
  for (const d of ['tmp', 'root', 'proc', 'sys', 'dev']) await mkdir(join(dir, d), { recursive: true });
  await chmod(join(dir, 'tmp'), 0o1777);
}

async function encodeLayer(layout: string, tar: string, o: BusyboxImageOptions, prioritize: string[]) {
  if (o.format === 'gzip') return await gzipLayerIntoLayout(layout, tar);
  return await writerLayerIntoLayout(layout, tar, {
    format: o.format,
    ...(o.chunkSize ? { chunkSize: o.chunkSize } : {}),
    ...(prioritize.length > 0 ? { prioritize } : {}),
  });
}

export async function buildBusyboxImage(o: BusyboxImageOptions): Promise<BusyboxImageResult> {
  if (!['gzip', 'estargz', 'zstd:chunked'].includes(o.format)) {
    throw new StoreError('E_INVALID_ARGUMENT', `unknown format ${o.format}`);
  }
  const scratch = o.workDir ?? (await mkdtemp(join(tmpdir(), 'sgz-bbimg-')));
  const owned = o.workDir === undefined;
  try {
    const base = join(scratch, 'base');
    const app = join(scratch, 'app');
    const layout = join(scratch, 'oci');
    await rm(base, { recursive: true, force: true });
    await rm(app, { recursive: true, force: true });
    await busyboxTree(base, o.busybox ?? '/bin/busybox');
    await mkdir(app, { recursive: true });
    for (const f of o.files) {
      const dest = join(app, f.dest);
      await mkdir(dirname(dest), { recursive: true });
      await cp(f.src, dest, { recursive: true, preserveTimestamps: true });
    }
    await initLayout(layout);
    const tars = [
      await createLayerTar({ root: base, out: join(scratch, 'base.tar') }),
      await createLayerTar({ root: app, out: join(scratch, 'app.tar') }),
    ];
    const wanted = (o.prioritize ?? []).map((p) => p.replace(/^\/+/, ''));
    const layers: Array<LayerBlob & { tocDigest?: string }> = [];
    for (const t of tars) {
      const have = new Set(t.entries);
      layers.push(
        await encodeLayer(
          layout,
          t.path,
          o,
          wanted.filter((p) => have.has(p)),
        ),
      );
    }
    const img = await writeImage(layout, o.tag, layers, {
      cmd: o.cmd ?? ['/bin/sh'],
      env: o.env ?? [DEFAULT_PATH],
      ...(o.workingDir ? { workingDir: o.workingDir } : {}),
    });
    const ref = `${o.registry}/${o.repo}:${o.tag}`;
    await skopeoPushLayout(layout, o.tag, ref);
    return {
      ref,
      manifestDigest: img.manifestDigest,
      layers: layers.map((l) => ({
        digest: l.digest,
        size: l.size,
        mediaType: l.mediaType,
        ...(l.tocDigest ? { tocDigest: l.tocDigest } : {}),
      })),
    };
  } finally {
    if (owned) await rm(scratch, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      registry: { type: 'string' },
      repo: { type: 'string' },
      tag: { type: 'string', default: 'latest' },
      format: { type: 'string', default: 'estargz' },
      file: { type: 'string', multiple: true, default: [] },
      cmd: { type: 'string' },
      env: { type: 'string', multiple: true, default: [] },
      workdir: { type: 'string' },
      prioritize: { type: 'string', multiple: true, default: [] },
      'chunk-size': { type: 'string' },
      'work-dir': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help || !values.registry || !values.repo) {
    process.stderr.write(
      'usage: busybox-image.js --registry HOST:PORT --repo NAME [--tag T] [--format estargz|zstd:chunked|gzip]\n' +
        '         [--file SRC[:/DEST]]... [--cmd \'["/bin/sh","-c","..."]\' | --cmd \'sh -c ...\'] [--env K=V]...\n' +
        '         [--workdir DIR] [--prioritize /PATH]... [--chunk-size BYTES] [--work-dir SCRATCH]\n',
    );
    process.exitCode = values.help ? 0 : 2;
    return;
  }
  let cmd: string[] | undefined;
  if (values.cmd !== undefined) {
    cmd = values.cmd.trim().startsWith('[')
      ? (JSON.parse(values.cmd) as string[])
      : ['/bin/sh', '-c', values.cmd];
  }
  const r = await buildBusyboxImage({
    registry: values.registry,
    repo: values.repo,
    tag: values.tag,
    format: values.format as ImageFormat,
    files: values.file.map(parseFileSpec),
    ...(cmd ? { cmd } : {}),
    env: [DEFAULT_PATH, ...values.env],
    ...(values.workdir ? { workingDir: values.workdir } : {}),
    prioritize: values.prioritize,
    ...(values['chunk-size'] ? { chunkSize: Number(values['chunk-size']) } : {}),
    ...(values['work-dir'] ? { workDir: values['work-dir'] } : {}),
  });
  process.stdout.write(JSON.stringify(r) + '\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    const msg = isStoreError(err)
      ? `${err.code}: ${err.message}`
      : err instanceof Error
        ? err.message
        : String(err);
    process.stderr.write(`busybox-image: ${msg}\n`);
    process.exitCode = 1;
  });
}
