import type { LayerIndex } from '../format/model.js';
import { StoreError, asStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { RangeReader } from '../util/range-reader.js';
import { withDeadline } from '../fs/deadline.js';
import type { CreateLayerFn, FoundLayer, LazyLayerLike, OpenLayerFn, StoreRegistry } from './deps.js';
import { DiffView } from './diff-view.js';
import type { InoAllocator } from './ino.js';
import type { MetaStore } from './meta-store.js';
import { buildInfo, type LayerRecord } from './record.js';
import { estimateTarSize } from './tar-size.js';

export const ANNOTATION_STARGZ_TOC = 'containerd.io/snapshot/stargz/toc.digest';
export const ANNOTATION_UNCOMPRESSED_SIZE = 'io.containers.estargz.uncompressed-size';
const ZSTD_CHECKSUM_KEYS = [
  'io.github.containers.zstd-chunked.manifest-checksum',
  'io.containers.zstd-chunked.manifest-checksum',
];
const ZSTD_POSITION_KEYS = [
  'io.github.containers.zstd-chunked.manifest-position',
  'io.containers.zstd-chunked.manifest-position',
];

const MAX_ENTRIES = 10_000;

/** One opened blob, shared by every `(ref, digest)` name that points at it. */
export interface LayerHandle {
  ref: string;
  blobDigest: string;
  blob: RangeReader;
  index: LayerIndex;
  view: DiffView;
  layer: LazyLayerLike;
}

export interface ResolvedLayer {
  record: LayerRecord;
  info: Buffer;
  handle: LayerHandle;
  infoIno: number;
  blobIno: number;
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

interface Entry {
  ref: string;
  digest: string;
  inflight?: Promise<ResolvedLayer>;
  startedAt: number;
  resolved?: ResolvedLayer;
  failure?: { error: NotLazyError; until: number };
  lastError?: string;
}

export interface ResolverOptions {
  registry: StoreRegistry;
  openLayer: OpenLayerFn;
  createLayer: CreateLayerFn;
  meta: MetaStore;
  ino: InoAllocator;
  logger: Logger;
  /** How long "cannot serve lazily" answers are remembered. */
  negativeTtlMs: number;
  /** Cap on one background resolution (it outlives the FUSE call that started it). */
  resolveTimeoutMs: number;
  /** Start prefetch + background fetch as soon as a layer is resolved. */
  startLayers: boolean;
}

function isZstdMedia(mediaType: string): boolean {
  return /zstd/i.test(mediaType);
}

function isSupportedMedia(mediaType: string): boolean {
  return /tar\+gzip|tar\+zstd|tar\.gzip|rootfs\.diff\.tar\.gzip/i.test(mediaType);
}

type Desc = FoundLayer['descriptor'];

function firstAnnotation(d: Desc, keys: string[]): { key: string; value: string } | undefined {
  for (const key of keys) {
    const value = d.annotations[key];
    if (value) return { key, value };
  }
  return undefined;
}

/** The TOC digest a blob-digest (OLD) lookup verifies against: the annotation matching the framing. */
function tocAnnotationFor(d: Desc): { key: string; value: string } | undefined {
  const stargz = firstAnnotation(d, [ANNOTATION_STARGZ_TOC]);
  const zstd = firstAnnotation(d, ZSTD_CHECKSUM_KEYS);
  return isZstdMedia(d.mediaType) ? (zstd ?? stargz) : (stargz ?? zstd);
}

function tocOffsetHint(d: Desc): number | undefined {
  const pos = firstAnnotation(d, ZSTD_POSITION_KEYS);
  if (!pos) return undefined;
  const f = pos.value.split(':');
  if (f.length !== 4) return undefined;
  const n = Number(f[0]);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** Any of the parser's own TOC hashes equals the expected digest: the TOC bytes are the promised ones. */
function tocMatches(index: LayerIndex, expected: string): boolean {
  return (
    expected === index.tocDigest || expected === index.tocJsonDigest || expected === index.manifestChecksum
  );
}

/**
 * Resolves `(ref, digest)` to a verified, lazily readable layer. One entry per name, one opened blob
 * per `(ref, blob digest)`, no global lock: a slow registry only delays the names that need it.
 */
export class LayerResolver {
  private readonly entries = new Map<string, Entry>();
  private readonly handles = new Map<string, Promise<LayerHandle>>();
  private closed = false;

  constructor(private readonly o: ResolverOptions) {}

  private entry(ref: string, digest: string): Entry {
    const key = `${ref}\n${digest}`;
    let e = this.entries.get(key);
    if (!e) {
      if (this.entries.size >= MAX_ENTRIES) this.prune();
      e = { ref, digest, startedAt: 0 };
      this.entries.set(key, e);
    }
    return e;
  }

  /** Forget expired negative answers (stray lookups must not grow memory without bound). */
  private prune(): void {
    const now = Date.now();
    for (const [k, x] of this.entries) {
      if (!x.resolved && !x.inflight && (!x.failure || x.failure.until <= now)) this.entries.delete(k);
    }
  }

  /** Already resolved? (no I/O) */
  peek(ref: string, digest: string): ResolvedLayer | undefined {
    return this.entries.get(`${ref}\n${digest}`)?.resolved;
  }

  allEntries(): Iterable<Entry> {
    return this.entries.values();
  }

  /**
   * Resolve within `waitMs`. Rejects with NotLazyError when the layer cannot be served lazily (also
   * remembered for negativeTtlMs) and with E_DEADLINE when the answer is not there in time; the
   * resolution itself goes on in the background so a later lookup can still succeed.
   */
  async resolve(ref: string, digest: string, waitMs: number): Promise<ResolvedLayer> {
    if (this.closed) throw new StoreError('E_ABORTED', 'store is shutting down', { ref, digest });
    const e = this.entry(ref, digest);
    if (e.resolved) return e.resolved;
    if (e.failure && e.failure.until > Date.now()) throw e.failure.error;
    if (!e.inflight) {
      const started = Date.now();
      e.startedAt = started;
      e.inflight = withDeadline(this.o.resolveTimeoutMs, (signal) => this.doResolve(e, signal), {
        ref,
        digest,
      })
        .then(
          (r) => {
            e.resolved = r;
            e.failure = undefined;
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
            e.failure = { error: nl, until: Date.now() + this.o.negativeTtlMs };
            e.lastError = nl.reason;
            this.o.logger.info(
              {
                ref,
                digest,
                'remote-snapshot-prepared': 'false',
                lazy: false,
                reason: nl.reason,
                code: err instanceof StoreError ? err.code : undefined,
                ms: Date.now() - started,
              },
              'layer not served lazily (client falls back to a normal pull)',
            );
            throw nl;
          },
        )
        .finally(() => {
          e.inflight = undefined;
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
    const saved = await this.o.meta.getLayer(ref, digest).catch(() => undefined);
    if (saved) {
      // A restart: serve exactly what was resolved before, whatever the tag points at now.
      const handle = await this.openHandle(
        saved.ref,
        saved.blobDigest,
        saved.blobSize,
        saved.tocDigest,
        saved.tocOffsetHint,
        saved.diffId,
        signal,
      );
      return this.finish(saved, handle);
    }
    let found: FoundLayer;
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
        : tocAnnotationFor(desc);
    if (!toc) {
      throw new NotLazyError('layer has no TOC digest annotation (plain gzip/zstd layer)', { ref, digest });
    }
    if (!diffId) {
      throw new NotLazyError('image config has no matching rootfs.diff_ids entry', { ref, digest });
    }
    const hint = tocOffsetHint(desc);
    const handle = await this.openHandle(ref, desc.digest, desc.size, toc.value, hint, diffId, signal);
    const index = handle.index;
    const annotated = Number(desc.annotations[ANNOTATION_UNCOMPRESSED_SIZE]);
    const measured = handle.layer.state().uncompressedSize;
    let diffSize: number;
    let diffSizeSource: LayerRecord['diffSizeSource'];
    if (
      Number.isSafeInteger(annotated) &&
      annotated >= 0 &&
      desc.annotations[ANNOTATION_UNCOMPRESSED_SIZE] !== ''
    ) {
      diffSize = annotated;
      diffSizeSource = 'annotation';
    } else if (measured !== undefined) {
      diffSize = measured;
      diffSizeSource = 'measured';
    } else {
      diffSize = estimateTarSize(index);
      diffSizeSource = 'toc-estimate';
    }
    const record: LayerRecord = {
      version: 1,
      ref,
      digest,
      matchedBy,
      blobDigest: desc.digest,
      blobSize: desc.size,
      mediaType: desc.mediaType,
      compression: index.compression,
      format: index.format,
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
      if (found.manifestBytes) await this.o.meta.putBlob(found.manifestDigest, found.manifestBytes);
    } catch (err) {
      // still servable now; only a restart would need the registry's manifest again
      this.o.logger.warn({ ref, digest, err }, 'cannot persist layer record');
    }
    return this.finish(record, handle);
  }

  private finish(record: LayerRecord, handle: LayerHandle): ResolvedLayer {
    return { record, info: buildInfo(record), handle, infoIno: this.o.ino.one(), blobIno: this.o.ino.one() };
  }

  private openHandle(
    ref: string,
    blobDigest: string,
    size: number,
    expectedToc: string,
    hint: number | undefined,
    diffId: string | undefined,
    signal: AbortSignal,
  ): Promise<LayerHandle> {
    const key = `${ref}\n${blobDigest}`;
    let p = this.handles.get(key);
    if (!p) {
      p = (async () => {
        const blob = await this.o.registry.openBlob(ref, blobDigest, size, signal);
        const opts: { expectedTocDigest: string; tocOffsetHint?: number; signal: AbortSignal } = {
          expectedTocDigest: expectedToc,
          signal,
        };
        if (hint !== undefined) opts.tocOffsetHint = hint;
        const index = await this.o.openLayer(blob, opts);
        if (!tocMatches(index, expectedToc)) {
          throw new StoreError('E_TOC_DIGEST_MISMATCH', 'TOC does not match the digest the image names', {
            ref,
            digest: blobDigest,
            expected: expectedToc,
            actual: index.tocDigest,
          });
        }
        const args = { ref, blobDigest, index, blob, logger: this.o.logger.child({ ref, blob: blobDigest }) };
        const layer = this.o.createLayer(diffId ? { ...args, diffId } : args);
        if (this.o.startLayers) {
          try {
            layer.start?.();
          } catch (err) {
            this.o.logger.warn({ ref, blobDigest, err }, 'cannot start background fetch');
          }
        }
        const view = new DiffView(index, this.o.ino.reserve(index.nodes.length + 1));
        return { ref, blobDigest, blob, index, view, layer };
      })();
      this.handles.set(key, p);
      p.catch(() => {
        if (this.handles.get(key) === p) this.handles.delete(key);
      });
      return p;
    }
    // shared blob opened under another name: still check this name's TOC digest
    return p.then((h) => {
      if (!tocMatches(h.index, expectedToc)) {
        throw new StoreError('E_TOC_DIGEST_MISMATCH', 'TOC does not match the digest the image names', {
          ref,
          digest: blobDigest,
          expected: expectedToc,
        });
      }
      return h;
    });
  }

  /** All opened layers (for status). */
  async openedHandles(): Promise<LayerHandle[]> {
    const out: LayerHandle[] = [];
    for (const p of this.handles.values()) {
      const h = await p.catch(() => undefined);
      if (h) out.push(h);
    }
    return out;
  }

  async close(): Promise<void> {
    this.closed = true;
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
