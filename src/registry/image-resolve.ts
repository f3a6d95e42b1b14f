import { StoreError, isStoreError } from '../util/errors.js';
import { matchLayer, type FoundLayer, type ResolvedImage } from './layer-match.js';
import {
  MEDIA_DOCKER_LIST,
  MEDIA_DOCKER_MANIFEST,
  MEDIA_OCI_INDEX,
  MEDIA_OCI_MANIFEST,
  type Descriptor,
} from './manifest.js';
import type { FetchedManifest, MetadataFetcher } from './metadata-fetch.js';
import { choosePlatform, type Platform } from './platform.js';
import type { ImageRef } from './reference.js';

const MANIFEST_MEDIA = new Set([MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST]);
const INDEX_MEDIA = new Set([MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST]);
const MAX_INDEX_DEPTH = 4;

/** Sees a platform manifest's layers once the manifest is known, before its config is fetched. */
export type OnManifest = (layers: readonly Descriptor[]) => void;

/**
 * From a reference to images: the top manifest or index, nested indexes flattened, the platform
 * chosen, the config fetched; and the search for a layer across every platform of an image.
 * Fetching and caching are the MetadataFetcher's; deadlines are the caller's `signal`.
 */
export class ImageResolver {
  constructor(
    private readonly fetch: MetadataFetcher,
    /** The node's platforms, best first. */
    private readonly platforms: readonly Platform[],
  ) {}

  private top(ref: ImageRef, signal: AbortSignal): Promise<FetchedManifest> {
    return this.fetch.manifest(ref, ref.digest ?? ref.tag ?? 'latest', signal);
  }

  /** Every manifest an index lists, nested indexes flattened (index order kept). */
  private async flattenIndex(
    ref: ImageRef,
    manifests: Descriptor[],
    signal: AbortSignal,
    depth: number,
  ): Promise<Descriptor[]> {
    const out: Descriptor[] = [];
    for (const d of manifests) {
      if (INDEX_MEDIA.has(d.mediaType)) {
        if (depth >= MAX_INDEX_DEPTH)
          throw new StoreError('E_MANIFEST', 'image indexes nested too deeply', { ref: ref.toString() });
        const nested = await this.fetch.manifest(ref, d.digest, signal);
        if (nested.doc.kind !== 'index')
          throw new StoreError('E_MANIFEST', 'descriptor says index, content is a manifest', {
            digest: d.digest,
          });
        // children without a platform inherit the parent entry's
        const kids = nested.doc.manifests.map((k) =>
          k.platform || !d.platform ? k : { ...k, platform: d.platform },
        );
        out.push(...(await this.flattenIndex(ref, kids, signal, depth + 1)));
      } else if (MANIFEST_MEDIA.has(d.mediaType)) {
        out.push(d);
      }
    }
    return out;
  }

  private async build(
    ref: ImageRef,
    fm: FetchedManifest,
    platformHint: Platform | undefined,
    index: ResolvedImage['index'],
    signal: AbortSignal,
    onManifest?: OnManifest,
  ): Promise<ResolvedImage> {
    if (fm.doc.kind !== 'manifest')
      throw new StoreError('E_MANIFEST', 'expected an image manifest', { digest: fm.digest });
    const manifest = fm.doc;
    // the caller may start on the layers while the config is fetched (a hook never fails this)
    try {
      onManifest?.(manifest.layers);
    } catch {
      /* the caller's own business */
    }
    const { config, bytes: configBytes } = await this.fetch.config(ref, manifest.config, signal);
    const platform: Platform = platformHint ?? {
      os: config.os ?? 'linux',
      architecture: config.architecture ?? 'unknown',
      ...(config.variant ? { variant: config.variant } : {}),
    };
    const img: ResolvedImage = {
      ref,
      manifestDigest: fm.digest,
      manifest,
      manifestBytes: fm.bytes,
      config,
      configBytes,
      configDigest: manifest.config.digest,
      platform,
      layers: manifest.layers.map((l) => ({
        digest: l.digest,
        size: l.size,
        mediaType: l.mediaType,
        annotations: l.annotations,
      })),
      diffIDs: config.rootfs.diff_ids,
    };
    if (index) img.index = index;
    return img;
  }

  /** One platform's image (the first of `wanted` the index offers). */
  async resolve(
    ref: ImageRef,
    wanted: readonly Platform[],
    signal: AbortSignal,
    onManifest?: OnManifest,
  ): Promise<ResolvedImage> {
    const top = await this.top(ref, signal);
    if (top.doc.kind === 'manifest') return this.build(ref, top, undefined, undefined, signal, onManifest);
    const entries = await this.flattenIndex(ref, top.doc.manifests, signal, 0);
    const chosen = choosePlatform(entries, [...wanted]);
    if (!chosen) {
      throw new StoreError(
        'E_PLATFORM_NOT_FOUND',
        `no manifest for ${wanted.map((p) => `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ''}`).join(', ')}`,
        {
          ref: ref.toString(),
          available: entries
            .map((e) => (e.platform ? `${e.platform.os}/${e.platform.architecture}` : '?'))
            .join(','),
        },
      );
    }
    const fm = await this.fetch.manifest(ref, chosen.digest, signal);
    return this.build(
      ref,
      fm,
      chosen.platform,
      { digest: top.digest, mediaType: top.doc.mediaType, manifests: entries },
      signal,
      onManifest,
    );
  }

  /**
   * A layer by blob or TOC digest in any platform manifest, the node's platforms searched first.
   * `onManifest` sees each platform manifest's layers as soon as it is known (before its config).
   */
  async findLayer(
    ref: ImageRef,
    digestOrToc: string,
    signal: AbortSignal,
    onManifest?: OnManifest,
  ): Promise<FoundLayer> {
    const first = await this.resolve(ref, this.platforms, signal, onManifest).catch((err: unknown) => {
      if (isStoreError(err, 'E_PLATFORM_NOT_FOUND')) return undefined;
      throw err;
    });
    if (first) {
      const hit = matchLayer(first.layers, digestOrToc);
      if (hit) return { image: first, ...hit };
    }
    const top = await this.top(ref, signal);
    if (top.doc.kind === 'index') {
      const entries = first?.index?.manifests ?? (await this.flattenIndex(ref, top.doc.manifests, signal, 0));
      const index = { digest: top.digest, mediaType: top.doc.mediaType, manifests: entries };
      for (const e of entries) {
        if (first && e.digest === first.manifestDigest) continue;
        const fm = await this.fetch.manifest(ref, e.digest, signal);
        if (fm.doc.kind !== 'manifest') continue;
        const hit = matchLayer(fm.doc.layers, digestOrToc);
        if (hit) return { image: await this.build(ref, fm, e.platform, index, signal, onManifest), ...hit };
      }
    }
    throw new StoreError(
      'E_NOT_FOUND',
      `layer ${digestOrToc.slice(0, 80)} is not in any manifest of ${ref.toString()}`,
      { ref: ref.toString(), digest: digestOrToc.slice(0, 80) },
    );
  }

  /** The chosen platform's image first, then every other platform manifest of the index. */
  async allPlatforms(ref: ImageRef, signal: AbortSignal): Promise<ResolvedImage[]> {
    const top = await this.top(ref, signal);
    if (top.doc.kind === 'manifest') return [await this.build(ref, top, undefined, undefined, signal)];
    const entries = await this.flattenIndex(ref, top.doc.manifests, signal, 0);
    const index = { digest: top.digest, mediaType: top.doc.mediaType, manifests: entries };
    const chosen = choosePlatform(entries, [...this.platforms]);
    const ordered = chosen ? [chosen, ...entries.filter((e) => e !== chosen)] : entries;
    const out: ResolvedImage[] = [];
    for (const e of ordered) {
      // attestation and other artifact manifests have configs that are not images: skip them unfetched
      if (e !== chosen && e.platform?.os === 'unknown') continue;
      const fm = await this.fetch.manifest(ref, e.digest, signal);
      if (fm.doc.kind !== 'manifest') continue;
      out.push(await this.build(ref, fm, e.platform, index, signal));
    }
    return out;
  }
}
