import { ANNOTATION_STARGZ_TOC, tocAnnotation, tocOffsetHint } from '../registry/manifest.js';
import { matchLayer, type LayerDescriptor } from '../registry/layer-match.js';
import { parseReference, type ImageRef } from '../registry/reference.js';
import { isValidDigest, parseDigest, type Digest } from '../util/digest.js';
import { StoreError, asStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { withDeadline } from '../util/abort.js';
import type { CreateLayerFn, LayerMatch, OpenLayerFn, StoreRegistry } from './deps.js';
import { DiffSizePolicy } from './diff-size.js';
import { EagerQueue, KnownImages, siblingNames } from './eager.js';
import { syntheticIno, type InoAllocator } from './ino.js';
import { LayerPool, type HandleSpec, type LayerHandle } from './layer-pool.js';
import type { MetaStore } from './meta-store.js';
import {
  isDemanded,
  NameTable,
  NotLazyError,
  nameKey,
  type Entry,
  type ResolvedLayer,
} from './name-table.js';
import { buildInfo, type LayerRecord } from './record.js';
import { TocTails } from './toc-tail.js';

export { NotLazyError, type Entry, type ResolvedLayer } from './name-table.js';
export type { LayerHandle } from './layer-pool.js';

export interface ResolverOptions {
  registry: StoreRegistry;
  openLayer: OpenLayerFn;
  createLayer: CreateLayerFn;
  meta: MetaStore;
  ino: InoAllocator;
  logger: Logger;
  /** How long "cannot serve lazily" answers are remembered (never for names with a saved record). */
  negativeTtlMs: number;
  /** Cap on one background resolution (it outlives the FUSE call that started it). */
  resolveTimeoutMs: number;
  /** Start prefetch + background fetch once a client asked for a resolved layer. */
  startLayers: boolean;
  /** Does the client hold this name (use/release count above zero)? In-use layers stay open. */
  inUse(ref: string, digest: string): boolean;
  /** An idle layer (not in use, no open file) is closed after this long without access. */
  idleTtlMs: number;
  /** At most this many idle layers stay open (least recently used are closed first). */
  maxIdleLayers: number;
  /** Names remembered (resolved, failed or resolving); in-use and resolving names are kept beyond it. */
  maxEntries: number;
  /** Other layers of an image resolved at once ahead of the client (0: none). */
  eagerConcurrency?: number;
}

export const RESOLVER_DEFAULTS = {
  idleTtlMs: 120_000,
  maxIdleLayers: 32,
  maxEntries: 10_000,
  eagerConcurrency: 3,
};

function isSupportedMedia(mediaType: string): boolean {
  return /tar\+gzip|tar\+zstd|tar\.gzip|rootfs\.diff\.tar\.gzip/i.test(mediaType);
}

/**
 * Resolves `(ref, digest)` to a verified, lazily readable layer. One entry per name (NameTable),
 * one opened blob per blob digest shared across refs and tags (LayerPool), no global lock: a slow
 * registry only delays the names that need it. A resolved name is persisted (its record before the
 * answer, the verified TOC bytes just after it: TocTails), so after a restart, or after its idle
 * handle was closed, it re-opens from disk without the registry. The first lookup of a layer starts resolving the image's other layers
 * (EagerQueue): clients look layers up one at a time, each under a lock, so the later ones find
 * their answer ready.
 */
export class LayerResolver {
  private readonly names: NameTable;
  private readonly pool: LayerPool;
  private readonly sizes: DiffSizePolicy;
  private readonly known = new KnownImages();
  private readonly eager: EagerQueue;
  private closed = false;

  constructor(private readonly o: ResolverOptions) {
    const busy = (e: Entry) => e.inflight !== undefined || o.inUse(e.ref, e.digest);
    this.names = new NameTable(o.maxEntries, busy, (e) => this.detach(e));
    this.sizes = new DiffSizePolicy(o.meta, o.logger);
    this.eager = new EagerQueue(o.eagerConcurrency ?? RESOLVER_DEFAULTS.eagerConcurrency);
    this.pool = new LayerPool({
      registry: o.registry,
      createLayer: o.createLayer,
      tocs: new TocTails(o.meta, o.openLayer, o.logger),
      ino: o.ino,
      logger: o.logger,
      startLayers: o.startLayers,
      idleTtlMs: o.idleTtlMs,
      maxIdleLayers: o.maxIdleLayers,
      // a name still finishing its resolution counts as a user too
      nameBusy: busy,
      onClosed: (names) => {
        for (const e of names) {
          e.resolved = undefined;
          // a name nobody holds is simply forgotten; it re-resolves from its record when looked up
          if (!e.inflight && !e.failure) this.names.delete(e);
        }
      },
    });
  }

  /** Remove a name from the blob it resolved to (the blob may become idle). */
  private detach(e: Entry): void {
    const h = e.resolved?.handle;
    if (h) this.pool.detach(e, h);
    e.resolved = undefined;
  }

  /** Already resolved? (no I/O). Called for a client's request: the layer's fetching may start. */
  peek(ref: ImageRef, digest: Digest): ResolvedLayer | undefined {
    const e = this.names.get(ref, digest);
    const r = e?.resolved;
    if (!e || !r) return undefined;
    this.pool.touch(r.handle);
    this.pool.activate(r.handle);
    this.sizes.refresh(e, r);
    return r;
  }

  allEntries(): Iterable<Entry> {
    return this.names.values();
  }

  /** Names remembered and blobs open (memory bounds; tests and status). */
  counts(): { names: number; layers: number } {
    return { names: this.names.size, layers: this.pool.size };
  }

  /** Resolves once every layer record and saved TOC written so far is on disk (tests, shutdown). */
  recordsSaved(): Promise<void> {
    return this.o.meta.idle();
  }

  /** Resolves once no resolution ahead of the client is queued or running (tests). */
  eagerIdle(): Promise<void> {
    return this.eager.idle();
  }

  /**
   * Resolve within `waitMs`. Rejects with NotLazyError when the layer cannot be served lazily (also
   * remembered for negativeTtlMs unless the name has a saved record) and with E_DEADLINE when the
   * answer is not there in time; the resolution itself goes on in the background so a later lookup
   * can still succeed.
   */
  async resolve(image: ImageRef, digest: Digest, waitMs: number): Promise<ResolvedLayer> {
    const ref = image.toString();
    if (this.closed) throw new StoreError('E_ABORTED', 'store is shutting down', { ref, digest });
    const e = this.names.entry(image, digest);
    const hit = this.peek(image, digest);
    if (hit) return hit;
    const failed = this.names.activeFailure(e);
    if (failed) throw failed;
    if (e.inflight !== undefined && !isDemanded(e)) {
      // resolving ahead of the client, which asks for it now: it goes first from here
      e.askedAt = Date.now();
      const release = this.pool.demand();
      e.inflight.then(release, release);
    }
    // a client's own resolution (a name resolved ahead before may come back here once closed)
    if (e.inflight === undefined) e.eager = false;
    const inflight = e.inflight ?? this.start(e);
    // The budget counts from the start of the resolution, not from this call: the kernel serialises
    // concurrent lookups of one name, so each waiter taking a full budget would add up.
    // (a resolution started ahead of the client counts from the client's first ask)
    const remaining = (e.askedAt ?? e.startedAt) + waitMs - Date.now();
    if (remaining <= 0) {
      throw new StoreError('E_DEADLINE', 'layer resolution is taking longer than the lookup budget', {
        ref,
        digest,
      });
    }
    const r = await withDeadline(remaining, () => inflight, { context: { ref, digest } });
    this.pool.activate(r.handle);
    return r;
  }

  /** Start resolving a name (the one resolution of it: later lookups join `e.inflight`). */
  private start(e: Entry): Promise<ResolvedLayer> {
    const { ref, digest } = e;
    const started = Date.now();
    e.startedAt = started;
    e.failure = undefined;
    e.askedAt = undefined;
    e.heldMs = undefined;
    // a client waits on it (not resolved ahead): other layers' parses yield to it until answered
    const release = isDemanded(e) ? this.pool.demand() : undefined;
    const inflight = withDeadline(this.o.resolveTimeoutMs, (signal) => this.doResolve(e, signal), {
      context: { ref, digest },
    })
      .then(
        (r) => {
          e.resolved = r;
          e.lastError = undefined;
          this.o.logger.info(
            {
              ref,
              digest,
              'remote-snapshot-prepared': 'true',
              lazy: true,
              matchedBy: r.record.matchedBy,
              format: r.handle.index.format,
              tocDigest: r.record.tocDigest,
              blobDigest: r.record.blobDigest,
              diffSizeSource: r.record.diffSizeSource,
              fromRecord: e.hasRecord === true,
              eager: e.eager === true,
              ...resolvedTimes(e, started),
            },
            'layer resolved: served lazily',
          );
          return r;
        },
        (err: unknown) => {
          const nl =
            err instanceof NotLazyError ? err : new NotLazyError(describeFailure(err), { ref, digest }, err);
          // A name with a saved record resolved before: its failure (registry down, credentials
          // gone after a restart) is transient, and remembering it would keep a running
          // container's layer broken after the cause went away.
          // Nor is a resolution started ahead of the client that timed out: its parse may have
          // waited for the layers the client was pulling (parse-gate.ts); the client's own
          // lookup tries again.
          const heldBack = e.eager === true && err instanceof StoreError && err.code === 'E_DEADLINE';
          if (!e.hasRecord && !heldBack) e.failure = { error: nl, until: Date.now() + this.o.negativeTtlMs };
          e.lastError = nl.reason;
          const fields = {
            ref,
            digest,
            reason: nl.reason,
            code: err instanceof StoreError ? err.code : undefined,
            eager: e.eager === true,
            ms: Date.now() - started,
          };
          if (e.hasRecord) this.o.logger.warn(fields, 'layer with a saved record cannot be opened now');
          else {
            this.o.logger.info(
              { ...fields, 'remote-snapshot-prepared': 'false', lazy: false },
              'layer not served lazily (client falls back to a normal pull)',
            );
          }
          throw nl;
        },
      )
      .finally(() => {
        release?.();
        e.inflight = undefined;
        // the layer this name opened may be idle now: keep the number of open idle layers bounded
        if (e.resolved) this.pool.sweepIdle();
      });
    e.inflight = inflight;
    // the waiting caller may give up first; the outcome is recorded above either way
    inflight.catch(() => undefined);
    return inflight;
  }

  /**
   * Queue the other layers of `found`'s image, base first (the order clients look them up in),
   * under the name form the client used. Each resolves exactly as a lookup would (the match comes
   * from KnownImages), so its outcome, good or "not lazy", is in the name table when asked for.
   */
  private resolveSiblings(ref: ImageRef, found: LayerMatch): void {
    for (const digest of siblingNames(found)) {
      // only a digest can be an ALS name (a malformed TOC annotation never is asked for)
      if (!isValidDigest(digest)) continue;
      this.eager.push(() => {
        if (this.closed) return undefined;
        const e = this.names.entry(ref, digest);
        if (e.resolved || e.inflight || this.names.activeFailure(e)) return undefined;
        e.eager = true;
        return this.start(e);
      });
    }
  }

  private async doResolve(e: Entry, signal: AbortSignal): Promise<ResolvedLayer> {
    const { ref, digest } = e;
    const saved = await this.o.meta.getLayer(ref, digest).catch((err: unknown) => {
      this.o.logger.warn({ ref, digest, err }, 'cannot read layer record; resolving from the registry');
      return undefined;
    });
    if (saved) {
      // A restart (or a closed idle handle): serve exactly what was resolved before, whatever the
      // tag points at now, from the saved TOC; the registry is only needed for missing chunks.
      e.hasRecord = true;
      const spec: HandleSpec = {
        ref: saved.ref,
        // the record comes from disk: its identities are parsed here, once
        image: saved.ref === e.ref ? e.image : parseReference(saved.ref),
        blobDigest: parseDigest(saved.blobDigest, 'recorded blob digest'),
        blobSize: saved.blobSize,
        tocDigest: saved.tocDigest,
        diffId: saved.diffId,
      };
      if (saved.tocOffsetHint !== undefined) spec.tocOffsetHint = saved.tocOffsetHint;
      const handle = await this.pool.handleFor(spec, e, signal);
      return this.finish(e, saved, handle);
    }
    const found = this.known.match(ref, digest) ?? (await this.findLayer(e.image, digest, signal));
    if (!e.eager) {
      this.known.learn(ref, found);
      this.resolveSiblings(e.image, found);
    }
    const { descriptor: desc, matchedBy, diffId } = found;
    if (!isSupportedMedia(desc.mediaType)) {
      throw new NotLazyError(`unsupported layer media type ${desc.mediaType}`, { ref, digest });
    }
    const toc =
      matchedBy === 'toc'
        ? {
            key: Object.entries(desc.annotations).find(([, v]) => v === digest)?.[0] ?? ANNOTATION_STARGZ_TOC,
            value: digest,
          }
        : tocAnnotation(desc);
    if (!toc) {
      throw new NotLazyError('layer has no TOC digest annotation (plain gzip/zstd layer)', { ref, digest });
    }
    if (!diffId) {
      throw new NotLazyError('image config has no matching rootfs.diff_ids entry', { ref, digest });
    }
    const hint = tocOffsetHint(desc);
    const spec: HandleSpec = {
      ref,
      image: e.image,
      blobDigest: desc.digest,
      blobSize: desc.size,
      tocDigest: toc.value,
      diffId,
    };
    if (hint !== undefined) spec.tocOffsetHint = hint;
    const handle = await this.pool.handleFor(spec, e, signal);
    const { diffSize, diffSizeSource } = await this.sizes.size(found, handle, signal);
    const record: LayerRecord = {
      version: 1,
      ref,
      digest,
      matchedBy,
      blobDigest: desc.digest,
      blobSize: desc.size,
      mediaType: desc.mediaType,
      compression: handle.index.compression,
      format: handle.index.format,
      tocDigest: toc.value,
      tocAnnotation: toc.key,
      diffId,
      diffSize,
      diffSizeSource,
      manifestDigest: found.manifestDigest,
      configDigest: found.configDigest,
      resolvedAt: new Date().toISOString(),
    };
    if (hint !== undefined) record.tocOffsetHint = hint;
    // Saved off the lookup's path: the answer does not wait for a disk write queued behind the
    // other layers' TOC parses (measured: 70-90 ms of a zstd:chunked resolution). Until it lands
    // the layer is servable; a restart before then resolves it from the registry again.
    // (MetaStore orders it before later reads and writes of the record.)
    this.o.meta.putLayer(record).catch((err: unknown) => {
      // still servable now; only a restart would need the registry's manifest again
      this.o.logger.warn({ ref, digest, err }, 'cannot persist layer record');
    });
    return this.finish(e, record, handle);
  }

  private async findLayer(ref: ImageRef, digest: Digest, signal: AbortSignal): Promise<LayerMatch> {
    try {
      return await this.o.registry.findLayer(ref, digest, signal, (layers) =>
        this.readTailsAhead(ref, digest, layers),
      );
    } catch (err) {
      if (err instanceof StoreError && err.code === 'E_NOT_FOUND') {
        const ctx = { ref: ref.toString(), digest };
        throw new NotLazyError('digest is not a layer (or TOC) digest of the image', ctx, err);
      }
      throw err;
    }
  }

  /**
   * The manifest is known, the config not yet: start the TOC's first read of the looked-up layer
   * (and of the others, which are resolved ahead next) now, so it overlaps the config fetch
   * instead of following it. Only layers that can be served lazily, and whose TOC is not saved
   * under --root already (fetched once).
   */
  private readTailsAhead(ref: ImageRef, digest: Digest, layers: readonly LayerDescriptor[]): void {
    if (this.closed) return;
    const ahead = (this.o.eagerConcurrency ?? RESOLVER_DEFAULTS.eagerConcurrency) > 0;
    const asked = matchLayer(layers, digest)?.descriptor;
    // The looked-up layer's read goes first: the first read from a host whose Range support is
    // not known yet is the only one in flight until it answers (registry/host-range-profile.ts),
    // and the client waits on this layer, not on the ones resolved ahead.
    const readTail = async (desc: LayerDescriptor): Promise<void> => {
      if (!isSupportedMedia(desc.mediaType) || !tocAnnotation(desc)) return;
      const saved = await this.o.meta.hasTocTail(desc.digest).catch(() => true);
      if (!saved) this.pool.prefetchTail(ref, desc.digest, desc.size, tocOffsetHint(desc));
    };
    const first = asked !== undefined ? readTail(asked) : Promise.resolve();
    if (ahead) for (const desc of layers) if (desc !== asked) void first.then(() => readTail(desc));
  }

  private finish(e: Entry, record: LayerRecord, handle: LayerHandle): ResolvedLayer {
    const key = nameKey(e.ref, e.digest);
    return {
      record,
      info: buildInfo(record),
      handle,
      infoIno: syntheticIno(`${key}\ninfo`),
      blobIno: syntheticIno(`${key}\nblob`),
    };
  }

  /** All opened layers (for status). */
  openedHandles(): Promise<LayerHandle[]> {
    return this.pool.openedHandles();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.eager.clear();
    await this.pool.close();
    // records still being saved land before the store says it stopped
    await this.recordsSaved();
  }
}

/**
 * How long the resolution took, as the client saw it: `ms` from the lookup to the answer. A name
 * resolved ahead of the client (eager) counts from the client's lookup when it asked during the
 * resolution, and is 0 when it was resolved before anyone asked (the lookup is then answered at
 * once); `workMs` is the resolution's own run time and `heldMs` the part of it its TOC parse
 * waited for parses a client was waiting on (parse-gate.ts).
 */
function resolvedTimes(e: Entry, started: number): { ms: number; workMs?: number; heldMs?: number } {
  const now = Date.now();
  if (e.eager !== true) return { ms: now - started };
  const held = e.heldMs !== undefined ? { heldMs: Math.round(e.heldMs) } : {};
  return { ms: e.askedAt !== undefined ? now - e.askedAt : 0, workMs: now - started, ...held };
}

function describeFailure(err: unknown): string {
  const e = asStoreError(err);
  switch (e.code) {
    case 'E_DEADLINE':
      return `resolution timed out (${e.message})`;
    case 'E_TOC_DIGEST_MISMATCH':
      return `TOC verification failed: ${e.message}`;
    default:
      return `${e.code}: ${e.message}`;
  }
}
