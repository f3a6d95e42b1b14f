import type { Digest } from '../util/digest.js';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { linkSignals } from '../util/abort.js';
import { RangeFetchShared, RegistryBlobReader, type BlobReader } from './blob-reader.js';
import { probeBlobSize } from './blob-size.js';
import type { RegistryClientOptions } from './client-options.js';
import { CredentialChain } from './credentials.js';
import { eachEndpoint } from './endpoint-failover.js';
import { resolveEndpoints, type Endpoint, type HostsConfig } from './hosts.js';
import { ImageResolver, type OnManifest } from './image-resolve.js';
import type { FoundLayer, ResolvedImage } from './layer-match.js';
import { MetadataFetcher } from './metadata-fetch.js';
import { hostPlatform, parsePlatform, type Platform } from './platform.js';
import type { ImageRef } from './reference.js';
import { retryPolicy } from './retry.js';
import { Transport } from './transport.js';

export type { RegistryClientOptions } from './client-options.js';

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
  /** Manifests, indexes and configs, fetched once and cached. */
  private readonly metadata: MetadataFetcher;
  private readonly images: ImageResolver;
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
    this.metadata = new MetadataFetcher({
      transport: this.transport,
      failover: (ref, what, fn, signal) => this.eachEndpoint(ref, what, fn, signal),
      resolveTimeoutMs: this.o.resolveTimeoutMs,
      tagTtlMs: this.o.tagTtlMs,
      maxManifestBytes: this.o.maxManifestBytes,
      maxConfigBytes: this.o.maxConfigBytes,
    });
    this.images = new ImageResolver(this.metadata, this.platforms);
  }

  /** Requests sent and tokens fetched so far (tests, status). */
  counters(): { requests: number; tokenRequests: number } {
    return { requests: this.transport.requests, tokenRequests: this.transport.authorizer.tokenRequests };
  }

  /** Entries held by the client's name-keyed caches (memory bounds; tests and status). */
  cacheSizes(): { tags: number; tokens: number } {
    return { tags: this.metadata.cachedTags, tokens: this.transport.authorizer.cachedTokens };
  }

  async close(): Promise<void> {
    await this.transport.close();
  }

  /** Mirrors first, then the registry (see hosts.ts). */
  endpoints(ref: ImageRef): Endpoint[] {
    return resolveEndpoints(ref, this.hosts);
  }

  /** Endpoints of `ref` in fail-over order, the health record shared with blob reads. */
  private eachEndpoint<T>(
    ref: ImageRef,
    what: string,
    fn: (ep: Endpoint) => Promise<T>,
    signal: AbortSignal,
    digest?: string,
  ): Promise<T> {
    return eachEndpoint(
      this.endpoints(ref),
      this.fleet.health,
      this.logger,
      { ref, what, signal, ...(digest !== undefined ? { digest } : {}) },
      fn,
    );
  }

  private remaining(started: number, budget: number): number {
    return Math.max(1, budget - (Date.now() - started));
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
    return this.withResolveDeadline(opts.signal, (signal) => this.images.resolve(ref, wanted, signal));
  }

  /**
   * Find a layer by blob digest or TOC digest in ANY platform manifest of the image (a runtime
   * may pull another platform for a different runtime class). The host platform is searched first.
   */
  async findLayer(
    ref: ImageRef,
    digestOrToc: Digest,
    opts: { signal?: AbortSignal; onManifest?: OnManifest } = {},
  ): Promise<FoundLayer> {
    return this.withResolveDeadline(opts.signal, (signal) =>
      this.images.findLayer(ref, digestOrToc, signal, opts.onManifest),
    );
  }

  /**
   * The selected platform's image first, then every other platform manifest of the index (for
   * callers that match layers themselves). A plain manifest gives a single entry.
   */
  async resolveAllPlatforms(ref: ImageRef, opts: { signal?: AbortSignal } = {}): Promise<ResolvedImage[]> {
    return this.withResolveDeadline(opts.signal, (signal) => this.images.allPlatforms(ref, signal));
  }

  /** Pick the endpoint that has the blob and learn its size (HEAD, else `Range: bytes=0-0`). */
  async openBlob(
    ref: ImageRef,
    digest: Digest,
    opts: { size?: number; signal?: AbortSignal; skipProbe?: boolean } = {},
  ): Promise<BlobReader> {
    if (opts.skipProbe === true && opts.size !== undefined) {
      // the size comes from a verified manifest and every range answer is checked against it
      // (Content-Range total), a missing blob fails over like any read: no HEAD round trip first
      // configured order: the reader ranks endpoints by health on every read (it takes the last one
      // as the registry itself)
      return this.blobReader(ref, digest, opts.size, this.endpoints(ref));
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

  private blobReader(ref: ImageRef, digest: Digest, size: number, endpoints: Endpoint[]): BlobReader {
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
