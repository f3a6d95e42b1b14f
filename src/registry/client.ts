import { StoreError, isStoreError, type ErrorContext } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { BoundedMap } from './bounded-map.js';
import { RangeFetchShared, RegistryBlobReader, type BlobReader } from './blob-reader.js';
import { CredentialChain } from './credentials.js';
import { digestOf, verifyDigest } from './digest.js';
import { resolveEndpoints, type Endpoint, type HostsConfig } from './hosts.js';
import {
  MANIFEST_ACCEPT,
  MEDIA_DOCKER_LIST,
  MEDIA_DOCKER_MANIFEST,
  MEDIA_OCI_INDEX,
  MEDIA_OCI_MANIFEST,
  parseImageConfig,
  parseManifestDocument,
  type Descriptor,
  type ImageConfig,
  type ManifestDocument,
} from './manifest.js';
import { choosePlatform, hostPlatform, parsePlatform, type Platform } from './platform.js';
import type { RegistryClientOptions } from './client-options.js';

export type { RegistryClientOptions } from './client-options.js';
import type { ImageRef } from './reference.js';
import { retryPolicy } from './retry.js';
import { probeBlobSize } from './blob-size.js';
import { matchLayer, type FoundLayer, type ResolvedImage } from './layer-match.js';
import { linkSignals, raceSignal } from '../util/abort.js';
import { readBody, statusError, Transport } from './transport.js';

interface FetchedManifest {
  digest: string;
  doc: ManifestDocument;
  bytes: Buffer;
}

const MANIFEST_MEDIA = new Set([MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST]);
const INDEX_MEDIA = new Set([MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST]);
const MAX_INDEX_DEPTH = 4;
const DIGEST_CACHE_ENTRIES = 512;
const TAG_CACHE_ENTRIES = 4096;

/** Map-based LRU (digest-addressed content never changes, so entries only age out for memory). */
class Lru<V> {
  private readonly m = new Map<string, V>();
  constructor(private readonly max: number) {}
  get(k: string): V | undefined {
    const v = this.m.get(k);
    if (v !== undefined) {
      this.m.delete(k);
      this.m.set(k, v);
    }
    return v;
  }
  set(k: string, v: V): void {
    this.m.delete(k);
    this.m.set(k, v);
    if (this.m.size > this.max) this.m.delete(this.m.keys().next().value as string);
  }
}

/**
 * The registry side of the store: resolves references to manifests and configs across platforms
 * and mirrors, and opens blobs for range reads. Safe for concurrent use; one per process.
 */
export class RegistryClient {
  private readonly transport: Transport;
  private readonly hosts: HostsConfig;
  private readonly platforms: Platform[];
  private readonly logger: Logger;
  /** What each host does with Range, which hosts cool down, live whole-blob streams. */
  private readonly fleet: RangeFetchShared;
  /** tag -> manifest digest answers, each for tagTtlMs (bounded: a node sees many tags over time) */
  private readonly tagCache = new BoundedMap<string>(TAG_CACHE_ENTRIES);
  private readonly manifests = new Lru<FetchedManifest>(DIGEST_CACHE_ENTRIES);
  private readonly configs = new Lru<{ config: ImageConfig; bytes: Buffer }>(DIGEST_CACHE_ENTRIES);
  private readonly inflight = new Map<string, Promise<unknown>>();
  private readonly o: Required<
    Pick<
      RegistryClientOptions,
      | 'forceSingleRange'
      | 'fetchTimeoutMs'
      | 'resolveTimeoutMs'
      | 'tagTtlMs'
      | 'maxManifestBytes'
      | 'maxConfigBytes'
      | 'maxRangesPerRequest'
      | 'concurrency'
    >
  >;

  constructor(opts: RegistryClientOptions = {}) {
    this.logger = opts.logger ?? silentLogger;
    this.hosts = opts.hosts ?? {};
    this.platforms = (opts.platforms ?? []).map((p) => (typeof p === 'string' ? parsePlatform(p) : p));
    if (this.platforms.length === 0) this.platforms.push(hostPlatform());
    const creds =
      opts.credentials === undefined
        ? []
        : Array.isArray(opts.credentials)
          ? opts.credentials
          : [opts.credentials];
    const positive = (v: number | undefined, d: number, name: string) => {
      if (v === undefined) return d;
      if (!(v > 0)) throw new StoreError('E_CONFIG', `${name} must be positive`, { key: name });
      return v;
    };
    this.o = {
      forceSingleRange: opts.forceSingleRange ?? false,
      fetchTimeoutMs: positive(opts.fetchTimeoutMs, 300_000, 'fetchTimeoutMs'),
      resolveTimeoutMs: positive(opts.resolveTimeoutMs, 60_000, 'resolveTimeoutMs'),
      tagTtlMs: opts.tagTtlMs ?? 60_000,
      maxManifestBytes: positive(opts.maxManifestBytes, 4 << 20, 'maxManifestBytes'),
      maxConfigBytes: positive(opts.maxConfigBytes, 8 << 20, 'maxConfigBytes'),
      maxRangesPerRequest: Math.floor(positive(opts.maxRangesPerRequest, 64, 'maxRangesPerRequest')),
      concurrency: Math.floor(positive(opts.concurrency, 4, 'concurrency')),
    };
    this.fleet = new RangeFetchShared({
      ...opts.hostHealth,
      maxRangesPerRequest: this.o.maxRangesPerRequest,
      logger: this.logger,
      ...(opts.passingBytesSink ? { sink: opts.passingBytesSink } : {}),
    });
    this.transport = new Transport({
      credentials: creds.length ? new CredentialChain(creds, this.logger) : undefined,
      retry: retryPolicy(opts.retry),
      requestTimeoutMs: opts.requestTimeoutMs ?? 30_000,
      logger: this.logger,
      userAgent: opts.userAgent,
    });
  }

  /** Requests sent and tokens fetched so far (tests, status). */
  counters(): { requests: number; tokenRequests: number } {
    return { requests: this.transport.requests, tokenRequests: this.transport.authorizer.tokenRequests };
  }

  /** Entries held by the client's name-keyed caches (memory bounds; tests and status). */
  cacheSizes(): { tags: number; tokens: number } {
    return { tags: this.tagCache.size, tokens: this.transport.authorizer.cachedTokens };
  }

  async close(): Promise<void> {
    await this.transport.close();
  }

  /** Mirrors first, then the registry (see hosts.ts). */
  endpoints(ref: ImageRef): Endpoint[] {
    return resolveEndpoints(ref, this.hosts);
  }

  /**
   * Single-flight by key. The shared fetch runs under its own deadline, not under the first
   * caller's signal, so one caller giving up does not fail the others; each caller still stops
   * waiting when its own signal aborts.
   */
  private once<T>(
    key: string,
    signal: AbortSignal,
    fn: (own: AbortSignal, started: number) => Promise<T>,
  ): Promise<T> {
    let p = this.inflight.get(key) as Promise<T> | undefined;
    if (!p) {
      const own = linkSignals(
        [],
        this.o.resolveTimeoutMs,
        () =>
          new StoreError(
            'E_DEADLINE',
            `registry metadata fetch took longer than ${this.o.resolveTimeoutMs} ms`,
            { key },
          ),
      );
      p = fn(own.signal, Date.now()).finally(() => {
        own.dispose();
        this.inflight.delete(key);
      });
      p.catch(() => undefined);
      this.inflight.set(key, p);
    }
    return raceSignal(p, signal);
  }

  /**
   * Try each endpoint in order, mirrors cooling down after a failure moved last (the same health
   * record blob reads keep, so a dead mirror costs one timeout, not one per request). The
   * registry's own error wins over mirrors' when all fail. `digest`: a blob, so a 404 from a
   * mirror skips that mirror for this blob only.
   */
  private async eachEndpoint<T>(
    ref: ImageRef,
    what: string,
    fn: (ep: Endpoint) => Promise<T>,
    signal: AbortSignal,
    digest?: string,
  ): Promise<T> {
    const eps = this.endpoints(ref);
    const registry = eps[eps.length - 1];
    const health = this.fleet.health;
    const ordered = health.order(eps, digest);
    let lastErr: unknown;
    let registryErr: unknown;
    for (const ep of ordered) {
      try {
        const v = await fn(ep);
        health.succeeded(ep.origin);
        return v;
      } catch (err) {
        if (signal.aborted || isStoreError(err, 'E_ABORTED') || isStoreError(err, 'E_DEADLINE')) throw err;
        if (isStoreError(err, 'E_DIGEST_MISMATCH') || isStoreError(err, 'E_MANIFEST')) throw err;
        lastErr = err;
        if (ep === registry) registryErr = err;
        else if (hostDown(err)) health.hostFailed(ep.origin);
        else if (digest !== undefined && isStoreError(err, 'E_REGISTRY_NOT_FOUND'))
          health.blobMissing(ep.origin, digest);
        if (ep !== ordered[ordered.length - 1]) {
          this.logger.warn(
            { host: ep.host, what, code: isStoreError(err) ? err.code : 'E_IO' },
            'registry endpoint failed; trying the next',
          );
        }
      }
    }
    throw (
      registryErr ?? lastErr ?? new StoreError('E_CONFIG', 'no registry endpoint', { ref: ref.toString() })
    );
  }

  private remaining(started: number, budget: number): number {
    return Math.max(1, budget - (Date.now() - started));
  }

  /** Manifest or index by tag or digest (digest-addressed results are cached for good). */
  private async fetchManifest(
    ref: ImageRef,
    reference: string,
    signal: AbortSignal,
  ): Promise<FetchedManifest> {
    const byDigest = reference.includes(':');
    const repoKey = `${ref.registry}/${ref.repository}`;
    if (byDigest) {
      const hit = this.manifests.get(reference);
      if (hit) return hit;
    } else {
      const digest = this.tagCache.get(`${repoKey}:${reference}`);
      if (digest !== undefined) {
        const hit = this.manifests.get(digest);
        if (hit) return hit;
      }
    }
    return this.once(`m|${repoKey}|${reference}`, signal, async (signal, started) => {
      const got = await this.eachEndpoint(
        ref,
        'manifest',
        (ep) =>
          this.transport.send(
            {
              ep,
              path: `manifests/${reference}`,
              headers: { accept: MANIFEST_ACCEPT },
              ref: ref.toString(),
              what: 'manifest',
              signal,
              deadlineMs: this.remaining(started, this.o.resolveTimeoutMs),
              context: { ref: ref.toString(), reference },
            },
            async (res) => {
              const ctx: ErrorContext = { host: ep.host, ref: ref.toString(), reference };
              if (res.status !== 200) throw await statusError(res, { ...ctx, what: 'manifest' });
              const bytes = await readBody(res, this.o.maxManifestBytes, ctx);
              const ct = res.headers['content-type'];
              return { bytes, contentType: Array.isArray(ct) ? ct[0] : ct };
            },
          ),
        signal,
      );
      const ctx = { ref: ref.toString(), reference };
      let digest: string;
      if (byDigest) {
        await verifyDigest(got.bytes, reference, ctx);
        digest = reference;
      } else {
        digest = await digestOf(got.bytes);
      }
      const fm: FetchedManifest = {
        digest,
        doc: parseManifestDocument(got.bytes, got.contentType),
        bytes: got.bytes,
      };
      this.manifests.set(digest, fm);
      if (!byDigest && this.o.tagTtlMs > 0) {
        this.tagCache.set(`${repoKey}:${reference}`, digest, Date.now() + this.o.tagTtlMs);
      }
      return fm;
    });
  }

  private async fetchConfig(
    ref: ImageRef,
    desc: Descriptor,
    signal: AbortSignal,
  ): Promise<{ config: ImageConfig; bytes: Buffer }> {
    const hit = this.configs.get(desc.digest);
    if (hit) return hit;
    if (desc.size > this.o.maxConfigBytes) {
      throw new StoreError('E_TOO_LARGE', `image config of ${desc.size} bytes exceeds the limit`, {
        digest: desc.digest,
        size: desc.size,
      });
    }
    return this.once(`c|${desc.digest}`, signal, async (signal, started) => {
      const bytes = await this.eachEndpoint(
        ref,
        'config',
        (ep) =>
          this.transport.send(
            {
              ep,
              path: `blobs/${desc.digest}`,
              headers: { 'accept-encoding': 'identity' },
              ref: ref.toString(),
              what: 'config',
              signal,
              deadlineMs: this.remaining(started, this.o.resolveTimeoutMs),
              context: { digest: desc.digest },
            },
            async (res) => {
              const ctx = { host: ep.host, digest: desc.digest, what: 'config' };
              if (res.status !== 200) throw await statusError(res, ctx);
              return readBody(res, this.o.maxConfigBytes, ctx);
            },
          ),
        signal,
      );
      await verifyDigest(bytes, desc.digest, { ref: ref.toString(), what: 'config' });
      const got = { config: parseImageConfig(bytes), bytes };
      this.configs.set(desc.digest, got);
      return got;
    });
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
        const nested = await this.fetchManifest(ref, d.digest, signal);
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
  ): Promise<ResolvedImage> {
    if (fm.doc.kind !== 'manifest')
      throw new StoreError('E_MANIFEST', 'expected an image manifest', { digest: fm.digest });
    const manifest = fm.doc;
    const { config, bytes: configBytes } = await this.fetchConfig(ref, manifest.config, signal);
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

  private async withResolveDeadline<T>(
    signal: AbortSignal | undefined,
    fn: (s: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const linked = linkSignals(
      [signal],
      this.o.resolveTimeoutMs,
      () =>
        new StoreError('E_DEADLINE', `resolving the image took longer than ${this.o.resolveTimeoutMs} ms`),
    );
    try {
      return await fn(linked.signal);
    } finally {
      linked.dispose();
    }
  }

  /** Resolve a reference to one platform's manifest and config (host platform unless given). */
  async resolveImage(
    ref: ImageRef,
    opts: { platform?: Platform | string; signal?: AbortSignal } = {},
  ): Promise<ResolvedImage> {
    const wanted =
      opts.platform === undefined
        ? this.platforms
        : [typeof opts.platform === 'string' ? parsePlatform(opts.platform) : opts.platform];
    return this.withResolveDeadline(opts.signal, (signal) => this.resolveIn(ref, wanted, signal));
  }

  private async resolveIn(ref: ImageRef, wanted: Platform[], signal: AbortSignal): Promise<ResolvedImage> {
    const top = await this.fetchManifest(ref, ref.digest ?? ref.tag ?? 'latest', signal);
    if (top.doc.kind === 'manifest') return this.build(ref, top, undefined, undefined, signal);
    const entries = await this.flattenIndex(ref, top.doc.manifests, signal, 0);
    const chosen = choosePlatform(entries, wanted);
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
    const fm = await this.fetchManifest(ref, chosen.digest, signal);
    return this.build(
      ref,
      fm,
      chosen.platform,
      { digest: top.digest, mediaType: top.doc.mediaType, manifests: entries },
      signal,
    );
  }

  /**
   * Find a layer by blob digest or TOC digest in ANY platform manifest of the image (a runtime
   * may pull another platform for a different runtime class). The host platform is searched first.
   */
  async findLayer(
    ref: ImageRef,
    digestOrToc: string,
    opts: { signal?: AbortSignal } = {},
  ): Promise<FoundLayer> {
    return this.withResolveDeadline(opts.signal, async (signal) => {
      const first = await this.resolveIn(ref, this.platforms, signal).catch((err: unknown) => {
        if (isStoreError(err, 'E_PLATFORM_NOT_FOUND')) return undefined;
        throw err;
      });
      if (first) {
        const hit = matchLayer(first.layers, digestOrToc);
        if (hit) return { image: first, ...hit };
      }
      const top = await this.fetchManifest(ref, ref.digest ?? ref.tag ?? 'latest', signal);
      if (top.doc.kind === 'index') {
        const entries =
          first?.index?.manifests ?? (await this.flattenIndex(ref, top.doc.manifests, signal, 0));
        const index = { digest: top.digest, mediaType: top.doc.mediaType, manifests: entries };
        for (const e of entries) {
          if (first && e.digest === first.manifestDigest) continue;
          const fm = await this.fetchManifest(ref, e.digest, signal);
          if (fm.doc.kind !== 'manifest') continue;
          const hit = matchLayer(fm.doc.layers, digestOrToc);
          if (hit) return { image: await this.build(ref, fm, e.platform, index, signal), ...hit };
        }
      }
      throw new StoreError(
        'E_NOT_FOUND',
        `layer ${digestOrToc.slice(0, 80)} is not in any manifest of ${ref.toString()}`,
        {
          ref: ref.toString(),
          digest: digestOrToc.slice(0, 80),
        },
      );
    });
  }

  /**
   * The selected platform's image first, then every other platform manifest of the index (for
   * callers that match layers themselves). A plain manifest gives a single entry.
   */
  async resolveAllPlatforms(ref: ImageRef, opts: { signal?: AbortSignal } = {}): Promise<ResolvedImage[]> {
    return this.withResolveDeadline(opts.signal, async (signal) => {
      const top = await this.fetchManifest(ref, ref.digest ?? ref.tag ?? 'latest', signal);
      if (top.doc.kind === 'manifest') return [await this.build(ref, top, undefined, undefined, signal)];
      const entries = await this.flattenIndex(ref, top.doc.manifests, signal, 0);
      const index = { digest: top.digest, mediaType: top.doc.mediaType, manifests: entries };
      const chosen = choosePlatform(entries, this.platforms);
      const ordered = chosen ? [chosen, ...entries.filter((e) => e !== chosen)] : entries;
      const out: ResolvedImage[] = [];
      for (const e of ordered) {
        const fm = await this.fetchManifest(ref, e.digest, signal);
        if (fm.doc.kind !== 'manifest') continue;
        // attestation and other artifact manifests have configs that are not images: skip them
        if (e !== chosen && e.platform?.os === 'unknown') continue;
        out.push(await this.build(ref, fm, e.platform, index, signal));
      }
      return out;
    });
  }

  /** Pick the endpoint that has the blob and learn its size (HEAD, else `Range: bytes=0-0`). */
  async openBlob(
    ref: ImageRef,
    digest: string,
    opts: { size?: number; signal?: AbortSignal; skipProbe?: boolean } = {},
  ): Promise<BlobReader> {
    if (opts.skipProbe === true && opts.size !== undefined) {
      // the size comes from a verified manifest and every range answer is checked against it
      // (Content-Range total), a missing blob fails over like any read: no HEAD round trip first
      return this.blobReader(ref, digest, opts.size, this.fleet.health.order(this.endpoints(ref), digest));
    }
    const linked = linkSignals([opts.signal], this.o.resolveTimeoutMs);
    try {
      const started = Date.now();
      return await this.eachEndpoint(
        ref,
        'blob',
        async (ep) => {
          const size = await probeBlobSize(this.transport, this.logger, ep, ref, digest, linked.signal, () =>
            this.remaining(started, this.o.resolveTimeoutMs),
          );
          if (opts.size !== undefined && size !== opts.size) {
            throw new StoreError(
              'E_REGISTRY_PROTOCOL',
              `registry reports ${size} bytes for a ${opts.size}-byte blob`,
              {
                digest,
                host: ep.host,
                size,
                expected: opts.size,
              },
            );
          }
          // range reads start on the host that answered, the hosts after it stay for fail-over
          const eps = this.endpoints(ref);
          return this.blobReader(ref, digest, size, [
            ep,
            ...eps.slice(eps.findIndex((e) => e.origin === ep.origin) + 1),
          ]);
        },
        linked.signal,
      );
    } finally {
      linked.dispose();
    }
  }

  private blobReader(ref: ImageRef, digest: string, size: number, endpoints: Endpoint[]): BlobReader {
    return new RegistryBlobReader({
      transport: this.transport,
      shared: this.fleet,
      endpoints,
      ref: ref.toString(),
      digest,
      size,
      forceSingleRange: this.o.forceSingleRange,
      fetchTimeoutMs: this.o.fetchTimeoutMs,
      concurrency: this.o.concurrency,
      singleRangeGap: 256 * 1024,
    });
  }
}

/** The host itself failed (unreachable, 5xx, garbled answers), not just this request's object. */
function hostDown(err: unknown): boolean {
  return (
    !isStoreError(err) ||
    isStoreError(err, 'E_REGISTRY_NETWORK') ||
    isStoreError(err, 'E_REGISTRY_STATUS') ||
    isStoreError(err, 'E_REGISTRY_PROTOCOL') ||
    isStoreError(err, 'E_IO')
  );
}
