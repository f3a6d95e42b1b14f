import { createHash } from 'node:crypto';
import { access, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { gzipLayerIntoLayout, blobPath, initLayout, writeImage, type LayerBlob } from '../lib/oci.js';
import type { PodmanEnv } from '../lib/podman.js';
import { say } from '../lib/proc.js';
import {
  PROFILE_VERSION,
  prioritizeForLayers,
  selectPrioritized,
  type AccessProfile,
  type ProfileSource,
} from '../lib/profile.js';
import {
  fetchManifest,
  importLayoutToStorage,
  imageBytes,
  podmanPush,
  skopeoPushLayout,
} from '../lib/push.js';
import type { BenchRegistry } from '../lib/registry-server.js';
import { mountOverlay } from '../lib/rootfs.js';
import { writerLayerIntoLayout } from '../lib/writer.js';
import type { StoreCommand } from './modes.js';
import { recordedLazyRun } from './store-profile.js';
import type { Workload } from './workloads.js';

/**
 * Each workload pushed as: gzip (node zlib), zstd:chunked (Podman push — the format Podman itself
 * makes), eStargz (our writer), and eStargz optimised (our writer, prioritising the files of a recorded
 * access profile). One shared OCI layout under the work dir holds every encoded blob; encodings and
 * pushes are cached by content keys, so re-runs only re-push what changed.
 */

export type FormatId = 'gzip' | 'zstd-chunked' | 'estargz' | 'esgz-opt';
export const FORMATS: readonly FormatId[] = ['gzip', 'zstd-chunked', 'estargz', 'esgz-opt'];

export interface PushedImage {
  workload: string;
  format: FormatId;
  repo: string;
  tag: string;
  manifestDigest: string;
  compressedBytes: number;
  layers: Array<{ digest: string; size: number; mediaType: string; annotations?: Record<string, string> }>;
  /** Files prioritised per layer (esgz-opt). */
  prioritized?: number[];
  /** Profile files left out of the prioritisation (big, barely read). */
  notPrioritized?: string[];
}

export interface FormatOutcome {
  format: FormatId;
  image?: PushedImage;
  error?: string;
}

export interface FormatContext {
  workDir: string;
  registry: BenchRegistry;
  buildEnv: PodmanEnv;
  profileSource: ProfileSource;
  /** Our store: the `store` profile source runs the unoptimised eStargz image through it. */
  store?: StoreCommand;
}

const short = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 16);

async function exists(p: string): Promise<boolean> {
  return access(p).then(
    () => true,
    () => false,
  );
}

/** Encode one layer (cached by layer key + format + prioritize list). */
async function encodeLayer(
  ctx: FormatContext,
  layout: string,
  layer: Workload['layers'][number],
  format: 'gzip' | 'estargz',
  prioritize: string[],
): Promise<LayerBlob> {
  const dir = join(ctx.workDir, 'encoded');
  await mkdir(dir, { recursive: true });
  const k = `${layer.key}.${format}${prioritize.length ? '.' + short(prioritize.join('\n')) : ''}`;
  const meta = join(dir, `${k}.json`);
  const prev = await readFile(meta, 'utf8').catch(() => '');
  if (prev) {
    const b = JSON.parse(prev) as LayerBlob;
    if (await exists(blobPath(layout, b.digest))) return b;
  }
  const t0 = performance.now();
  const b =
    format === 'gzip'
      ? await gzipLayerIntoLayout(layout, layer.path)
      : await writerLayerIntoLayout(layout, layer.path, {
          format: 'estargz',
          ...(prioritize.length ? { prioritize } : {}),
        });
  say(
    `  encoded ${layer.path.split('/').pop()} as ${format}${prioritize.length ? ` (+${prioritize.length} prioritised)` : ''} in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
  await writeFile(meta, JSON.stringify(b));
  return b;
}

export async function recordProfile(ctx: FormatContext, w: Workload, layout: string): Promise<AccessProfile> {
  const dir = join(ctx.workDir, 'profiles');
  await mkdir(dir, { recursive: true });
  const label = `${w.name}-${w.key}-${ctx.profileSource.name.replace(/[^\w.-]/g, '_')}-v${PROFILE_VERSION}`;
  const file = join(dir, `${label}.json`);
  const prev = await readFile(file, 'utf8').catch(() => '');
  if (prev) return JSON.parse(prev) as AccessProfile;
  const merged = join(ctx.workDir, 'mnt', `${w.name}-rootfs`);
  const unmount = await mountOverlay(merged, w.rootfsLowers);
  try {
    say(`recording access profile of ${w.name} (${ctx.profileSource.name})`);
    const argv = [...(w.spec.entrypoint ?? []), ...w.spec.cmd];
    const store = ctx.store;
    const profile = await ctx.profileSource.record({
      rootfs: merged,
      argv,
      env: w.spec.env,
      workingDir: w.spec.workingDir ?? '/',
      scratch: dir,
      label,
      ...(store
        ? {
            lazyRun: async (recordFile: string) =>
              await recordedLazyRun({
                workDir: ctx.workDir,
                registryHost: ctx.registry.host,
                store,
                workload: w,
                image: await ensureFormat(ctx, w, 'estargz', layout),
                recordFile,
              }),
          }
        : {}),
    });
    if (profile.files.length === 0) {
      throw new StoreError('E_IO', `profile of ${w.name} recorded no files`, { path: merged });
    }
    await writeFile(file, JSON.stringify(profile, null, 1));
    return profile;
  } finally {
    await unmount();
  }
}

async function pushLayout(
  ctx: FormatContext,
  w: Workload,
  format: FormatId,
  key: string,
  make: () => Promise<
    { layout: string; tag: string; prioritized?: number[]; notPrioritized?: string[] } | { pushed: true }
  >,
): Promise<PushedImage> {
  const repo = `bench/${w.name}`;
  const recDir = join(ctx.workDir, 'pushed');
  await mkdir(recDir, { recursive: true });
  const recFile = join(recDir, `${w.name}.${format}.json`);
  const prev = await readFile(recFile, 'utf8').catch(() => '');
  const remote = await fetchManifest(ctx.registry.host, repo, format);
  if (prev && remote) {
    const rec = JSON.parse(prev) as PushedImage & { key: string };
    if (rec.key === key && rec.manifestDigest === remote.digest) return rec;
  }
  const t0 = performance.now();
  const made = await make();
  if ('layout' in made)
    await skopeoPushLayout(made.layout, made.tag, `${ctx.registry.host}/${repo}:${format}`);
  const m = await fetchManifest(ctx.registry.host, repo, format);
  if (!m) throw new StoreError('E_REGISTRY_NOT_FOUND', `pushed ${repo}:${format} but cannot read it back`);
  say(
    `  pushed ${repo}:${format} (${(imageBytes(m) / 1e6).toFixed(1)} MB) in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
  const img: PushedImage & { key: string } = {
    key,
    workload: w.name,
    format,
    repo,
    tag: format,
    manifestDigest: m.digest,
    compressedBytes: imageBytes(m),
    layers: m.manifest.layers,
    ...('prioritized' in made && made.prioritized ? { prioritized: made.prioritized } : {}),
    ...('notPrioritized' in made && made.notPrioritized ? { notPrioritized: made.notPrioritized } : {}),
  };
  await writeFile(recFile, JSON.stringify(img));
  return img;
}

/** Make sure every requested format of `w` is in the registry; failures are reported per format. */
export async function ensureFormats(
  ctx: FormatContext,
  w: Workload,
  formats: readonly FormatId[],
): Promise<FormatOutcome[]> {
  const layout = join(ctx.workDir, 'oci');
  await initLayout(layout);
  const out: FormatOutcome[] = [];
  // gzip first: zstd:chunked is made from it
  const order = [...formats].sort((a, b) => FORMATS.indexOf(a) - FORMATS.indexOf(b));
  for (const format of order) {
    try {
      say(`${w.name}: format ${format}`);
      const image = await ensureFormat(ctx, w, format, layout);
      out.push({ format, image });
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      say(`${w.name}: format ${format} FAILED: ${msg}`);
      out.push({ format, error: msg });
    }
  }
  return out;
}

async function ensureFormat(
  ctx: FormatContext,
  w: Workload,
  format: FormatId,
  layout: string,
): Promise<PushedImage> {
  const tagOf = (f: string) => `${w.name}-${f}`;
  switch (format) {
    case 'gzip':
      return await pushLayout(ctx, w, format, `${w.key}:gzip`, async () => {
        const layers: LayerBlob[] = [];
        for (const l of w.layers) layers.push(await encodeLayer(ctx, layout, l, 'gzip', []));
        await writeImage(layout, tagOf('gzip'), layers, w.spec);
        return { layout, tag: tagOf('gzip') };
      });
    case 'estargz':
      return await pushLayout(ctx, w, format, `${w.key}:estargz`, async () => {
        const layers: LayerBlob[] = [];
        for (const l of w.layers) layers.push(await encodeLayer(ctx, layout, l, 'estargz', []));
        await writeImage(layout, tagOf('estargz'), layers, w.spec);
        return { layout, tag: tagOf('estargz') };
      });
    case 'esgz-opt': {
      const profile = await recordProfile(ctx, w, layout);
      const chosen = selectPrioritized(profile);
      for (const s of chosen.skipped) {
        say(
          `  not prioritised: ${s.path} (${(s.size / 2 ** 20).toFixed(0)} MiB, ${(s.bytesRead / 2 ** 20).toFixed(1)} MiB read)`,
        );
      }
      const perLayer = prioritizeForLayers(
        chosen.files,
        w.layers.map((l) => new Set(l.entries)),
      );
      const key = `${w.key}:esgz-opt:${short(perLayer.map((p) => p.join('\n')).join('\0'))}`;
      return await pushLayout(ctx, w, format, key, async () => {
        const layers: LayerBlob[] = [];
        for (const [i, l] of w.layers.entries())
          layers.push(await encodeLayer(ctx, layout, l, 'estargz', perLayer[i]!));
        await writeImage(layout, tagOf('esgz-opt'), layers, w.spec);
        return {
          layout,
          tag: tagOf('esgz-opt'),
          prioritized: perLayer.map((p) => p.length),
          notPrioritized: chosen.skipped.map((x) => x.path),
        };
      });
    }
    case 'zstd-chunked':
      return await pushLayout(ctx, w, format, `${w.key}:zstd-chunked`, async () => {
        // Podman compresses from its local storage: import the gzip image there first
        await ensureFormat(ctx, w, 'gzip', layout);
        const local = `localhost/bench/${w.name}:${w.key}`;
        const have = await ctx.buildEnv.podman(['image', 'exists', local], { allowFail: true });
        if (have.code !== 0) await importLayoutToStorage(layout, tagOf('gzip'), local, ctx.buildEnv.env);
        await podmanPush(
          ctx.buildEnv.env,
          local,
          `${ctx.registry.host}/bench/${w.name}:zstd-chunked`,
          'zstd:chunked',
        );
        const m = await fetchManifest(ctx.registry.host, `bench/${w.name}`, 'zstd-chunked');
        const ok = m?.manifest.layers.every((l) =>
          Object.keys(l.annotations ?? {}).some((k) => k.includes('zstd-chunked.manifest-checksum')),
        );
        if (!ok) {
          throw new StoreError(
            'E_UNSUPPORTED_FORMAT',
            'podman push did not produce zstd:chunked layers (blob reuse?)',
            {
              ref: `bench/${w.name}:zstd-chunked`,
            },
          );
        }
        return { pushed: true };
      });
  }
}
