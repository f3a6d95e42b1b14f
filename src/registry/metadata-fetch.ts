import type { Digest } from '../util/digest.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { Lru } from '../util/lru.js';
import { SingleFlight } from '../util/single-flight.js';
import { linkSignals, raceSignal } from '../util/abort.js';
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
    const p = this.flights.run(key, async () => {
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
      try {
        return await fn(own.signal, Date.now());
      } finally {
        own.dispose();
      }
    }) as Promise<T>;
    // every caller may stop waiting: the shared fetch's failure must not surface as unhandled
    p.catch(() => undefined);
    return raceSignal(p, signal);
  }

  private remaining(started: number): number {
    return Math.max(1, this.o.resolveTimeoutMs - (Date.now() - started));
  }

  /** Manifest or index by tag or digest (digest-addressed results are cached for good). */
  async manifest(ref: ImageRef, reference: string, signal: AbortSignal): Promise<FetchedManifest> {
    const byDigest = reference.includes(':');
    const repoKey = `${ref.registry}/${ref.repository}`;
    const cached = this.manifests.get(
      byDigest ? reference : (this.tags.get(`${repoKey}:${reference}`) ?? ''),
    );
    if (cached) return cached;
    const refString = ref.toString();
    return this.once(`m|${repoKey}|${reference}`, signal, async (signal, started) => {
      const got = await this.o.failover(
        ref,
        'manifest',
        (ep) =>
          this.o.transport.send(
            {
              ep,
              path: `manifests/${reference}`,
              headers: { accept: MANIFEST_ACCEPT },
              ref: refString,
              what: 'manifest',
              signal,
              deadlineMs: this.remaining(started),
              context: { ref: refString, reference },
            },
            async (res) => {
              const ctx: ErrorContext = { host: ep.host, ref: refString, reference };
              if (res.status !== 200) throw await statusError(res, { ...ctx, what: 'manifest' });
              const bytes = await readBody(res, this.o.maxManifestBytes, ctx);
              const ct = res.headers['content-type'];
              return { bytes, contentType: Array.isArray(ct) ? ct[0] : ct };
            },
          ),
        signal,
      );
      const ctx = { ref: refString, reference };
      let digest: Digest;
      if (byDigest) {
        digest = await verifyDigest(got.bytes, reference, ctx);
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
    const refString = ref.toString();
    return this.once(`c|${desc.digest}`, signal, async (signal, started) => {
      const bytes = await this.o.failover(
        ref,
        'config',
        (ep) =>
          this.o.transport.send(
            {
              ep,
              path: `blobs/${desc.digest}`,
              headers: { 'accept-encoding': 'identity' },
              ref: refString,
              what: 'config',
              signal,
              deadlineMs: this.remaining(started),
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
      await verifyDigest(bytes, desc.digest, { ref: refString, what: 'config' });
      const got = { config: parseImageConfig(bytes), bytes };
      this.configs.set(desc.digest, got);
      return got;
    });
  }
}
