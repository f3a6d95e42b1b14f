import type { LayerIndex } from '../format/model.js';
import {
  ANNOTATION_STARGZ_TOC,
  tocAnnotation,
  tocOffsetHint,
  uncompressedSizeAnnotation,
} from '../registry/manifest.js';
import { StoreError, asStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { RangeReader } from '../util/range-reader.js';
import { withDeadline } from '../fs/deadline.js';
import { LazyBlob, RecordingReader, TailReader } from './blob-source.js';
import type { CreateLayerFn, LayerMatch, LazyLayerLike, OpenLayerFn, StoreRegistry } from './deps.js';
import { DiffView } from './diff-view.js';
import { syntheticIno, type InoAllocator } from './ino.js';
import type { MetaStore } from './meta-store.js';
import { buildInfo, type LayerRecord } from './record.js';
import { tarSizeFromTarSplit } from '../format/zstdchunked/tar-split-size.js';
import { tocTarSize } from '../format/tar-size.js';

/** One opened blob, shared by every `(ref, digest)` name that points at it (whatever the ref). */
export interface LayerHandle {
  /** The reference whose repository the blob is fetched from (the first name that opened it). */
  ref: string;
  blobDigest: string;
  blob: RangeReader;
  index: LayerIndex;
  view: DiffView;
  layer: LazyLayerLike;
  /** Keep the handle open while a file of it is open; call the returned function on release. */
  pin(): () => void;
}

export interface ResolvedLayer {
  readonly record: LayerRecord;
  /** Fixed for the life of the resolution (the kernel caches its size). */
  readonly info: Buffer;
  readonly handle: LayerHandle;
  readonly infoIno: number;
  readonly blobIno: number;
}

/** Why a layer is not served lazily: answered as ENOENT so the client pulls normally. */
export class NotLazyError extends StoreError {
  constructor(
    readonly reason: string,
    context: Record<string, string | number | undefined>,
    cause?: unknown,
  ) {
    super('E_NOT_FOUND', `layer is not served lazily: ${reason}`, context, { cause });
    this.name = 'NotLazyError';
  }
}

/** One looked-up name `(ref, digest)`. */
export interface Entry {
  ref: string;
  digest: string;
  inflight?: Promise<ResolvedLayer>;
  startedAt: number;
  resolved?: ResolvedLayer;
  failure?: { error: NotLazyError; until: number };
  lastError?: string;
  /** A record of this name is on disk: its failures are transient and never remembered. */
  hasRecord?: boolean;
  /** Next time an estimated diff-size may be replaced by a measured one. */
  sizeCheckAt?: number;
}

/** An opened (or opening) blob and who uses it. */
interface Slot {
  blobDigest: string;
  promise: Promise<LayerHandle>;
  handle?: LayerHandle;
  /** Names resolved to this blob. */
  names: Set<Entry>;
  /** Open files (diff content, blob). */
  opens: number;
  /** Resolutions waiting for this blob to open. */
  waiters: number;
  lastUsed: number;
  closed: boolean;
}

interface HandleSpec {
  ref: string;
  blobDigest: string;
  blobSize: number;
  tocDigest: string;
  tocOffsetHint?: number;
  diffId?: string;
}

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
  /** Start prefetch + background fetch as soon as a layer is resolved. */
  startLayers: boolean;
  /** Does the client hold this name (use/release count above zero)? In-use layers stay open. */
  inUse(ref: string, digest: string): boolean;
  /** An idle layer (not in use, no open file) is closed after this long without access. */
  idleTtlMs: number;
  /** At most this many idle layers stay open (least recently used are closed first). */
  maxIdleLayers: number;
  /** Names remembered (resolved, failed or resolving); in-use and resolving names are kept beyond it. */
  maxEntries: number;
}

export const RESOLVER_DEFAULTS = { idleTtlMs: 120_000, maxIdleLayers: 32, maxEntries: 10_000 };

/** Room kept before the TOC when its bytes are saved (zstd:chunked frame header). */
const FRAME_HEADER = 8;
/** Longest a resolution waits for the tar-split before it settles for the TOC estimate. */
const TAR_SPLIT_BUDGET_MS = 5000;
/** An estimated diff-size is compared with the layer's measured size at most this often. */
const SIZE_CHECK_INTERVAL_MS = 1000;

function isSupportedMedia(mediaType: string): boolean {
  return /tar\+gzip|tar\+zstd|tar\.gzip|rootfs\.diff\.tar\.gzip/i.test(mediaType);
}

/** Any of the parser's own TOC hashes equals the expected digest: the TOC bytes are the promised ones. */
function tocMatches(index: LayerIndex, expected: string): boolean {
  return (
    expected === index.tocDigest || expected === index.tocJsonDigest || expected === index.manifestChecksum
  );
}

/** LazyLayerState gained `uncompressedSize` late; read it defensively. */
function measuredSize(layer: LazyLayerLike): number | undefined {
  const v = (layer.state() as { uncompressedSize?: unknown }).uncompressedSize;
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}

/**
 * Resolves `(ref, digest)` to a verified, lazily readable layer. One entry per name, one opened
 * blob per blob digest (shared across refs and tags), no global lock: a slow registry only delays
 * the names that need it. A resolved name is persisted (record + verified TOC bytes), so after a
 * restart, or after its idle handle was closed, it re-opens from disk without the registry.
 */
export class LayerResolver {
  private readonly entries = new Map<string, Entry>();
  private readonly slots = new Map<string, Slot>();
  private readonly sweepTimer: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly o: ResolverOptions) {
    this.sweepTimer = setInterval(
      () => this.sweepIdle(),
      Math.max(1000, Math.min(30_000, Math.floor(o.idleTtlMs / 2))),
    );
    this.sweepTimer.unref();
  }

  private entry(ref: string, digest: string): Entry {
    const key = `${ref}\n${digest}`;
    let e = this.entries.get(key);
    if (!e) {
      if (this.entries.size >= this.o.maxEntries) this.shrinkEntries();
      e = { ref, digest, startedAt: 0 };
      this.entries.set(key, e);
    }
    return e;
  }

  /**
   * Forget the oldest names until there is room again. Resolving and in-use names are moved to the
   * back instead; each is looked at once per call, so the cost is amortised over the insertions.
   */
  private shrinkEntries(): void {
    let budget = this.entries.size;
    for (const [k, e] of this.entries) {
      if (this.entries.size < this.o.maxEntries || budget-- <= 0) break;
      this.entries.delete(k);
      if (e.inflight !== undefined || this.o.inUse(e.ref, e.digest)) this.entries.set(k, e);
      else this.detach(e);
    }
  }

  /** Remove a name from the blob it resolved to (the blob may become idle). */
  private detach(e: Entry): void {
    const h = e.resolved?.handle;
    if (h) this.slots.get(h.blobDigest)?.names.delete(e);
    e.resolved = undefined;
  }

  /** Already resolved? (no I/O) */
  peek(ref: string, digest: string): ResolvedLayer | undefined {
    const e = this.entries.get(`${ref}\n${digest}`);
    const r = e?.resolved;
    if (!r) return undefined;
    const slot = this.slots.get(r.handle.blobDigest);
    if (slot) slot.lastUsed = Date.now();
    if (r.record.diffSizeSource === 'toc-estimate' && r.record.matchedBy === 'blob')
      this.refreshDiffSize(e, r);
    return r;
  }

  allEntries(): Iterable<Entry> {
    return this.entries.values();
  }

  /** Names remembered and blobs open (memory bounds; tests and status). */
  counts(): { names: number; layers: number } {
    return { names: this.entries.size, layers: this.slots.size };
  }

  /**
   * Resolve within `waitMs`. Rejects with NotLazyError when the layer cannot be served lazily (also
   * remembered for negativeTtlMs unless the name has a saved record) and with E_DEADLINE when the
   * answer is not there in time; the resolution itself goes on in the background so a later lookup
   * can still succeed.
   */
  async resolve(ref: string, digest: string, waitMs: number): Promise<ResolvedLayer> {
    if (this.closed) throw new StoreError('E_ABORTED', 'store is shutting down', { ref, digest });
    const e = this.entry(ref, digest);
    const hit = this.peek(ref, digest);
    if (hit) return hit;
    if (e.failure && e.failure.until > Date.now()) throw e.failure.error;
    if (!e.inflight) {
      const started = Date.now();
      e.startedAt = started;
      e.failure = undefined;
      e.inflight = withDeadline(this.o.resolveTimeoutMs, (signal) => this.doResolve(e, signal), {
        ref,
        digest,
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
                ms: Date.now() - started,
              },
              'layer resolved: served lazily',
            );
            return r;
          },
          (err: unknown) => {
            const nl =
              err instanceof NotLazyError
                ? err
                : new NotLazyError(describeFailure(err), { ref, digest }, err);
            // A name with a saved record resolved before: its failure (registry down, credentials
            // gone after a restart) is transient, and remembering it would keep a running
            // container's layer broken after the cause went away.
            if (!e.hasRecord) e.failure = { error: nl, until: Date.now() + this.o.negativeTtlMs };
            e.lastError = nl.reason;
            const fields = {
              ref,
              digest,
              reason: nl.reason,
              code: err instanceof StoreError ? err.code : undefined,
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
          e.inflight = undefined;
          // the layer this name opened may be idle now: keep the number of open idle layers bounded
          if (e.resolved) this.sweepIdle();
        });
      // the waiting caller may give up first; the outcome is recorded above either way
      e.inflight.catch(() => undefined);
    }
    // The budget counts from the start of the resolution, not from this call: the kernel serialises
    // concurrent lookups of one name, so each waiter taking a full budget would add up.
    const remaining = e.startedAt + waitMs - Date.now();
    if (remaining <= 0) {
      throw new StoreError('E_DEADLINE', 'layer resolution is taking longer than the lookup budget', {
        ref,
        digest,
      });
    }
    return await withDeadline(remaining, () => e.inflight!, { ref, digest });
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
        blobDigest: saved.blobDigest,
        blobSize: saved.blobSize,
        tocDigest: saved.tocDigest,
        diffId: saved.diffId,
      };
      if (saved.tocOffsetHint !== undefined) spec.tocOffsetHint = saved.tocOffsetHint;
      const handle = await this.handleFor(spec, e, signal);
      return this.finish(e, saved, handle);
    }
    let found: LayerMatch;
    try {
      found = await this.o.registry.findLayer(ref, digest, signal);
    } catch (err) {
      if (err instanceof StoreError && err.code === 'E_NOT_FOUND') {
        throw new NotLazyError('digest is not a layer (or TOC) digest of the image', { ref, digest }, err);
      }
      throw err;
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
      blobDigest: desc.digest,
      blobSize: desc.size,
      tocDigest: toc.value,
      diffId,
    };
    if (hint !== undefined) spec.tocOffsetHint = hint;
    const handle = await this.handleFor(spec, e, signal);
    const { diffSize, diffSizeSource } = await this.diffSize(found, handle, signal);
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
    try {
      await this.o.meta.putLayer(record);
    } catch (err) {
      // still servable now; only a restart would need the registry's manifest again
      this.o.logger.warn({ ref, digest, err }, 'cannot persist layer record');
    }
    return this.finish(e, record, handle);
  }

  /**
   * The uncompressed tar size for the OLD `info` (containers/storage stores it and `podman save`
   * relies on it): the annotation, else the size measured by a full fetch, else (current
   * zstd:chunked) the tar-split, else an estimate from the TOC (see tocTarSize for when it is exact).
   */
  private async diffSize(
    found: LayerMatch,
    handle: LayerHandle,
    signal: AbortSignal,
  ): Promise<Pick<LayerRecord, 'diffSize' | 'diffSizeSource'>> {
    const annotated = uncompressedSizeAnnotation(found.descriptor);
    if (annotated !== undefined) return { diffSize: annotated, diffSizeSource: 'annotation' };
    const measured = measuredSize(handle.layer);
    if (measured !== undefined) return { diffSize: measured, diffSizeSource: 'measured' };
    const ctx = { ref: handle.ref, blobDigest: handle.blobDigest };
    // the NEW info form carries no diff-size: no need to fetch anything for it
    if (found.matchedBy === 'blob' && handle.index.format === 'zstd:chunked') {
      try {
        // bounded: the lookup that waits for this answer falls back to a full pull at its deadline
        const n = await withDeadline(
          TAR_SPLIT_BUDGET_MS,
          (s) => tarSizeFromTarSplit(handle.blob, handle.index, s),
          ctx,
          signal,
        );
        if (n !== undefined) return { diffSize: n, diffSizeSource: 'tar-split' };
      } catch (err) {
        if (signal.aborted) throw err;
        this.o.logger.warn({ ...ctx, err }, 'cannot size the layer from its tar-split');
      }
    }
    const est = tocTarSize(handle.index);
    if (found.matchedBy === 'blob') {
      this.o.logger.warn(
        { ...ctx, format: handle.index.format, diffSize: est.size, diffSizeEstimated: true },
        'layer diff-size estimated from its TOC (no uncompressed-size annotation or tar-split)',
      );
    }
    return { diffSize: est.size, diffSizeSource: 'toc-estimate' };
  }

  /**
   * Once a full fetch measured the layer, replace an estimated diff-size in the saved record: later
   * resolutions (another image with this layer, a restart) serve the exact number. The `info` this
   * name already serves keeps its bytes: a file whose size changes under the kernel's attribute cache
   * could be read torn, and containers/storage fails a pull on an undecodable `info`.
   */
  private refreshDiffSize(e: Entry, r: ResolvedLayer): void {
    const now = Date.now();
    if ((e.sizeCheckAt ?? 0) > now) return;
    e.sizeCheckAt = now + SIZE_CHECK_INTERVAL_MS;
    const measured = measuredSize(r.handle.layer);
    if (measured === undefined) return;
    e.sizeCheckAt = Infinity;
    const record: LayerRecord = { ...r.record, diffSize: measured, diffSizeSource: 'measured' };
    this.o.logger.info(
      { ref: e.ref, digest: e.digest, diffSize: measured, estimated: r.record.diffSize },
      'layer diff-size measured; the saved record replaces the TOC estimate',
    );
    this.o.meta.putLayer(record).catch((err: unknown) => {
      this.o.logger.warn({ ref: e.ref, digest: e.digest, err }, 'cannot persist layer record');
    });
  }

  private finish(e: Entry, record: LayerRecord, handle: LayerHandle): ResolvedLayer {
    const key = `${e.ref}\n${e.digest}`;
    return {
      record,
      info: buildInfo(record),
      handle,
      infoIno: syntheticIno(`${key}\ninfo`),
      blobIno: syntheticIno(`${key}\nblob`),
    };
  }

  /** The opened blob for `spec` (opening it once for every name and ref that points at it). */
  private async handleFor(spec: HandleSpec, e: Entry, signal: AbortSignal): Promise<LayerHandle> {
    for (;;) {
      let slot = this.slots.get(spec.blobDigest);
      if (!slot) slot = this.openSlot(spec, signal);
      slot.waiters++;
      let h: LayerHandle;
      try {
        h = await slot.promise;
      } finally {
        slot.waiters--;
      }
      // closed while we waited: open it again
      if (slot.closed) continue;
      // shared blob opened under another name: this name's digest must name the same, already
      // verified TOC (a comparison with the digests computed once, not another hash)
      if (!tocMatches(h.index, spec.tocDigest)) {
        throw new StoreError('E_TOC_DIGEST_MISMATCH', 'TOC does not match the digest the image names', {
          ref: spec.ref,
          digest: spec.blobDigest,
          expected: spec.tocDigest,
          actual: h.index.tocDigest,
        });
      }
      if (h.blob.size !== spec.blobSize) {
        throw new StoreError('E_MANIFEST', 'the manifest gives this blob another size', {
          ref: spec.ref,
          digest: spec.blobDigest,
          size: spec.blobSize,
          expected: h.blob.size,
        });
      }
      slot.names.add(e);
      slot.lastUsed = Date.now();
      return h;
    }
  }

  private openSlot(spec: HandleSpec, signal: AbortSignal): Slot {
    const slot: Slot = {
      blobDigest: spec.blobDigest,
      names: new Set(),
      opens: 0,
      waiters: 0,
      lastUsed: Date.now(),
      closed: false,
      promise: Promise.resolve(undefined as unknown as LayerHandle),
    };
    slot.promise = this.openHandle(spec, slot, signal).then((h) => {
      slot.handle = h;
      // bound the number of open idle layers as new ones arrive
      this.sweepIdle();
      return h;
    });
    this.slots.set(spec.blobDigest, slot);
    slot.promise.catch(() => {
      if (this.slots.get(spec.blobDigest) === slot) this.slots.delete(spec.blobDigest);
    });
    return slot;
  }

  private async openHandle(spec: HandleSpec, slot: Slot, signal: AbortSignal): Promise<LayerHandle> {
    const { ref, blobDigest } = spec;
    const blob = new LazyBlob(
      spec.blobSize,
      (s) => this.o.registry.openBlob(ref, blobDigest, spec.blobSize, s),
      { ref, digest: blobDigest },
    );
    const index = await this.openIndex(spec, blob, signal);
    const logger = this.o.logger.child({ ref, blob: blobDigest });
    const args = { ref, blobDigest, index, blob, logger };
    const layer = this.o.createLayer(spec.diffId ? { ...args, diffId: spec.diffId } : args);
    if (this.o.startLayers) {
      try {
        layer.start?.();
      } catch (err) {
        this.o.logger.warn({ ref, blobDigest, err }, 'cannot start background fetch');
      }
    }
    const view = new DiffView(index, this.o.ino.layerBlock(blobDigest, index.nodes.length + 1));
    const pin = () => {
      slot.opens++;
      slot.lastUsed = Date.now();
      let done = false;
      return () => {
        if (done) return;
        done = true;
        slot.opens--;
        slot.lastUsed = Date.now();
      };
    };
    return { ref, blobDigest, blob, index, view, layer, pin };
  }

  /** Footer + TOC from the saved tail when there is a good one, else from the registry (then saved). */
  private async openIndex(spec: HandleSpec, blob: LazyBlob, signal: AbortSignal): Promise<LayerIndex> {
    const ctx = { ref: spec.ref, digest: spec.blobDigest };
    const saved = await this.o.meta.getTocTail(spec.blobDigest, spec.blobSize).catch((err: unknown) => {
      this.o.logger.warn({ ...ctx, err }, 'cannot read the saved TOC');
      return undefined;
    });
    if (saved) {
      try {
        const toc = await this.o.openLayer(new TailReader(blob, saved.start, saved.bytes), {
          expectedTocDigest: spec.tocDigest,
          signal,
        });
        return toc.verify(spec.tocDigest);
      } catch (err) {
        if (signal.aborted) throw err;
        this.o.logger.warn({ ...ctx, err }, 'saved TOC cannot be used; reading it again');
      }
    }
    const rec = new RecordingReader(blob);
    const opts: { expectedTocDigest: string; tocOffsetHint?: number; signal: AbortSignal } = {
      expectedTocDigest: spec.tocDigest,
      signal,
    };
    if (spec.tocOffsetHint !== undefined) opts.tocOffsetHint = spec.tocOffsetHint;
    // the one TOC digest check: the index exists only if the TOC is the one the image names
    const index = (await this.o.openLayer(rec, opts)).verify(spec.tocDigest);
    // what the format reader needs again: from the TOC (zstd: its frame header) to the end
    const start = Math.max(0, index.tocOffset - (index.compression === 'zstd' ? FRAME_HEADER : 0));
    try {
      const bytes = rec.tail(start) ?? (await blob.read(start, spec.blobSize - start, signal));
      await this.o.meta.putTocTail({ blobDigest: spec.blobDigest, blobSize: spec.blobSize, start, bytes });
    } catch (err) {
      if (signal.aborted) throw err;
      // still servable now; a restart then needs the registry for the TOC
      this.o.logger.warn({ ...ctx, err }, 'cannot save the verified TOC');
    }
    return index;
  }

  /** Close idle layers: unused for idleTtlMs, or beyond maxIdleLayers (least recently used first). */
  private sweepIdle(): void {
    if (this.closed) return;
    const now = Date.now();
    const idle: Slot[] = [];
    for (const s of this.slots.values()) {
      if (!s.handle || s.closed || s.opens > 0 || s.waiters > 0) continue;
      let used = false;
      for (const e of s.names) {
        // a name still finishing its resolution counts as a user too
        if (e.inflight !== undefined || this.o.inUse(e.ref, e.digest)) {
          used = true;
          break;
        }
      }
      if (!used) idle.push(s);
    }
    idle.sort((a, b) => a.lastUsed - b.lastUsed);
    let over = idle.length - this.o.maxIdleLayers;
    for (const s of idle) {
      if (over <= 0 && now - s.lastUsed < this.o.idleTtlMs) break;
      over--;
      this.closeSlot(s);
    }
  }

  private closeSlot(s: Slot): void {
    s.closed = true;
    if (this.slots.get(s.blobDigest) === s) this.slots.delete(s.blobDigest);
    for (const e of s.names) {
      e.resolved = undefined;
      // a name nobody holds is simply forgotten; it re-resolves from its record when looked up
      if (!e.inflight && !e.failure) this.entries.delete(`${e.ref}\n${e.digest}`);
    }
    s.names.clear();
    const h = s.handle!;
    this.o.logger.debug({ blobDigest: s.blobDigest }, 'closing idle layer');
    Promise.resolve()
      .then(() => h.layer.close())
      .catch((err: unknown) => this.o.logger.warn({ err, blobDigest: s.blobDigest }, 'layer close failed'));
  }

  /** All opened layers (for status). */
  async openedHandles(): Promise<LayerHandle[]> {
    const out: LayerHandle[] = [];
    for (const s of [...this.slots.values()]) {
      const h = await s.promise.catch(() => undefined);
      if (h) out.push(h);
    }
    return out;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweepTimer);
    const hs = await this.openedHandles();
    await Promise.all(
      hs.map(async (h) => {
        try {
          await h.layer.close();
        } catch (err) {
          this.o.logger.warn({ err, blobDigest: h.blobDigest }, 'layer close failed');
        }
      }),
    );
  }
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
