import type { Digest } from '../util/digest.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { Lru } from '../util/lru.js';
import { SingleFlight } from '../util/single-flight.js';
import { digestOf, verifyDigest } from './digest.js';
import type { Endpoint } from './hosts.js';
import {
  MANIFEST_ACCEPT,
  parseImageConfig,
  parseManifestDocument,
  type Descriptor,
  type ImageConfig,
  type ManifestDocument,
} from './manifest.js';
import type { ImageRef } from './reference.js';
import { readBody, statusError } from './response-body.js';
import type { Transport } from './transport.js';

export interface FetchedManifest {
  digest: Digest;
  doc: ManifestDocument;
  bytes: Buffer;
}

export interface FetchedConfig {
  config: ImageConfig;
  bytes: Buffer;
}

/** Runs `fn` on each endpoint of `ref` in fail-over order (RegistryClient.eachEndpoint). */
export type Failover = <T>(
  ref: ImageRef,
  what: string,
  fn: (ep: Endpoint) => Promise<T>,
  signal: AbortSignal,
) => Promise<T>;

export interface MetadataFetchOptions {
  transport: Transport;
  failover: Failover;
  resolveTimeoutMs: number;
  tagTtlMs: number;
  maxManifestBytes: number;
  maxConfigBytes: number;
}

const DIGEST_CACHE_ENTRIES = 512;
const TAG_CACHE_ENTRIES = 4096;

/**
 * Manifests, indexes and image configs: fetched once per key (concurrent callers share the
 * fetch), verified against their digest, kept by digest (digest-addressed content never changes,
 * so entries only age out for memory) and tag answers for `tagTtlMs`.
 */
export class MetadataFetcher {
  /** tag -> manifest digest answers, each for tagTtlMs (bounded: a node sees many tags over time) */
  private readonly tags = new Lru<string, Digest>({ maxEntries: TAG_CACHE_ENTRIES });
  private readonly manifests = new Lru<string, FetchedManifest>({ maxEntries: DIGEST_CACHE_ENTRIES });
  private readonly configs = new Lru<string, FetchedConfig>({ maxEntries: DIGEST_CACHE_ENTRIES });
  private readonly flights = new SingleFlight<string, unknown>();

  constructor(private readonly o: MetadataFetchOptions) {}

  /** Tag answers held (memory bounds; tests and status). */
  get cachedTags(): number {
    return this.tags.size;
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
    const ms = this.o.resolveTimeoutMs;
    return this.flights.share(
      key,
      signal,
      ms,
      () => new StoreError('E_DEADLINE', `registry metadata fetch took longer than ${ms} ms`, { key }),
      (own) => fn(own, Date.now()),
    ) as Promise<T>;
  }

  private remaining(started: number): number {
    return Math.max(1, this.o.resolveTimeoutMs - (Date.now() - started));
  }

  /** GET one small document from the first endpoint that has it: status checked, size capped. */
  private get(
    ref: ImageRef,
    req: { what: string; path: string; headers: Record<string, string>; maxBytes: number },
    context: ErrorContext,
    signal: AbortSignal,
    started: number,
  ): Promise<{ bytes: Buffer; contentType: string | undefined }> {
    return this.o.failover(
      ref,
      req.what,
      (ep) =>
        this.o.transport.send(
          {
            ep,
            path: req.path,
            headers: req.headers,
            ref: ref.toString(),
            what: req.what,
            signal,
            deadlineMs: this.remaining(started),
            context,
          },
          async (res) => {
            const ctx: ErrorContext = { host: ep.host, ...context, what: req.what };
            if (res.status !== 200) throw await statusError(res, ctx);
            const bytes = await readBody(res, req.maxBytes, ctx);
            const ct = res.headers['content-type'];
            return { bytes, contentType: Array.isArray(ct) ? ct[0] : ct };
          },
        ),
      signal,
    );
  }

  /** Manifest or index by tag or digest (digest-addressed results are cached for good). */
  async manifest(ref: ImageRef, reference: string, signal: AbortSignal): Promise<FetchedManifest> {
    const byDigest = reference.includes(':');
    const repoKey = `${ref.registry}/${ref.repository}`;
    const cached = this.manifests.get(
      byDigest ? reference : (this.tags.get(`${repoKey}:${reference}`) ?? ''),
    );
    if (cached) return cached;
    return this.once(`m|${repoKey}|${reference}`, signal, async (signal, started) => {
      const ctx = { ref: ref.toString(), reference };
      const got = await this.get(
        ref,
        {
          what: 'manifest',
          path: `manifests/${reference}`,
          headers: { accept: MANIFEST_ACCEPT },
          maxBytes: this.o.maxManifestBytes,
        },
        ctx,
        signal,
        started,
      );
      const digest = byDigest ? await verifyDigest(got.bytes, reference, ctx) : await digestOf(got.bytes);
      const fm: FetchedManifest = {
        digest,
        doc: parseManifestDocument(got.bytes, got.contentType),
        bytes: got.bytes,
      };
      this.manifests.set(digest, fm);
      if (!byDigest && this.o.tagTtlMs > 0) {
        this.tags.set(`${repoKey}:${reference}`, digest, Date.now() + this.o.tagTtlMs);
      }
      return fm;
    });
  }

  /** The image config a manifest names, size-capped and verified. */
  async config(ref: ImageRef, desc: Descriptor, signal: AbortSignal): Promise<FetchedConfig> {
    const hit = this.configs.get(desc.digest);
    if (hit) return hit;
    if (desc.size > this.o.maxConfigBytes) {
      throw new StoreError('E_TOO_LARGE', `image config of ${desc.size} bytes exceeds the limit`, {
        digest: desc.digest,
        size: desc.size,
      });
    }
    // per repository: another repository may refuse the same digest (its endpoints, its credentials)
    return this.once(
      `c|${ref.registry}/${ref.repository}|${desc.digest}`,
      signal,
      async (signal, started) => {
        const { bytes } = await this.get(
          ref,
          {
            what: 'config',
            path: `blobs/${desc.digest}`,
            headers: { 'accept-encoding': 'identity' },
            maxBytes: this.o.maxConfigBytes,
          },
          { digest: desc.digest },
          signal,
          started,
        );
        await verifyDigest(bytes, desc.digest, { ref: ref.toString(), what: 'config' });
        const got = { config: parseImageConfig(bytes), bytes };
        this.configs.set(desc.digest, got);
        return got;
      },
    );
  }
}
