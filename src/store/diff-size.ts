import { uncompressedSizeAnnotation } from '../registry/manifest.js';
import type { Logger } from '../util/logger.js';
import { withDeadline } from '../util/abort.js';
import { tarSizeFromTarSplit } from '../format/zstdchunked/tar-split-size.js';
import { tocTarSize } from '../format/tar-size.js';
import type { LayerMatch, LazyLayerLike } from './deps.js';
import type { LayerHandle } from './layer-pool.js';
import type { MetaStore } from './meta-store.js';
import type { Entry, ResolvedLayer } from './name-table.js';
import type { LayerRecord } from './record.js';

/** Longest a resolution waits for the tar-split before it settles for the TOC estimate. */
const TAR_SPLIT_BUDGET_MS = 5000;
/** An estimated diff-size is compared with the layer's measured size at most this often. */
const SIZE_CHECK_INTERVAL_MS = 1000;

/** LazyLayerState gained `uncompressedSize` late; read it defensively. */
function measuredSize(layer: LazyLayerLike): number | undefined {
  const v = (layer.state() as { uncompressedSize?: unknown }).uncompressedSize;
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}

/**
 * Where the OLD `info`'s uncompressed tar size comes from (containers/storage stores it and
 * `podman save` relies on it), and when an estimate is replaced by a measured number.
 */
export class DiffSizePolicy {
  constructor(
    private readonly meta: MetaStore,
    private readonly logger: Logger,
  ) {}

  /**
   * The annotation, else the size measured by a full fetch, else (current zstd:chunked) the
   * tar-split, else an estimate from the TOC (see tocTarSize for when it is exact).
   */
  async size(
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
          { context: ctx, signal },
        );
        if (n !== undefined) return { diffSize: n, diffSizeSource: 'tar-split' };
      } catch (err) {
        if (signal.aborted) throw err;
        this.logger.warn({ ...ctx, err }, 'cannot size the layer from its tar-split');
      }
    }
    const est = tocTarSize(handle.index);
    if (found.matchedBy === 'blob') {
      this.logger.warn(
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
  refresh(e: Entry, r: ResolvedLayer, now = Date.now()): void {
    if (r.record.diffSizeSource !== 'toc-estimate' || r.record.matchedBy !== 'blob') return;
    if ((e.sizeCheckAt ?? 0) > now) return;
    e.sizeCheckAt = now + SIZE_CHECK_INTERVAL_MS;
    const measured = measuredSize(r.handle.layer);
    if (measured === undefined) return;
    e.sizeCheckAt = Infinity;
    const record: LayerRecord = { ...r.record, diffSize: measured, diffSizeSource: 'measured' };
    this.logger.info(
      { ref: e.ref, digest: e.digest, diffSize: measured, estimated: r.record.diffSize },
      'layer diff-size measured; the saved record replaces the TOC estimate',
    );
    this.meta.putLayer(record).catch((err: unknown) => {
      this.logger.warn({ ref: e.ref, digest: e.digest, err }, 'cannot persist layer record');
    });
  }
}
