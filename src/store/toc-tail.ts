import type { LayerIndex } from '../format/model.js';
import type { ParseTurns } from '../format/toc.js';
import { withDeadline } from '../util/abort.js';
import type { Logger } from '../util/logger.js';
import { RecordingReader, TailReader, type LazyBlob } from './blob-source.js';
import type { OpenLayerFn, OpenLayerOptions } from './deps.js';
import type { MetaStore } from './meta-store.js';

/** The blob's end read for the TOC is kept in memory for later reads up to this size. */
const MAX_HELD_TAIL = 4 * 1024 * 1024;

/** A TOC save that must read the blob again (its tail was not all read) gives up after this. */
const SAVE_READ_MS = 30_000;

/** Room kept before the TOC when its bytes are saved (zstd:chunked frame header). */
const FRAME_HEADER = 8;

export interface TocSpec {
  ref: string;
  blobDigest: string;
  blobSize: number;
  tocDigest: string;
  tocOffsetHint?: number;
}

/**
 * The verified TOC of a blob: from the tail saved under `--root` when there is a good one (no
 * registry), else read from the blob and its tail saved for the next time (a restart, a layer
 * re-opened after it was closed idle).
 */
export class TocTails {
  private readonly saving = new Set<Promise<void>>();

  constructor(
    private readonly meta: MetaStore,
    private readonly openLayer: OpenLayerFn,
    private readonly logger: Logger,
  ) {}

  async open(spec: TocSpec, blob: LazyBlob, signal: AbortSignal, turns?: ParseTurns): Promise<LayerIndex> {
    const ctx = { ref: spec.ref, digest: spec.blobDigest };
    const saved = await this.meta.getTocTail(spec.blobDigest, spec.blobSize).catch((err: unknown) => {
      this.logger.warn({ ...ctx, err }, 'cannot read the saved TOC');
      return undefined;
    });
    if (saved) {
      try {
        const toc = await this.openLayer(new TailReader(blob, saved.start, saved.bytes), {
          expectedTocDigest: spec.tocDigest,
          // the first read takes exactly the saved bytes: nothing before them is needed
          tailGuessBytes: saved.bytes.length,
          signal,
          ...(turns !== undefined ? { turns } : {}),
        });
        const index = toc.verify(spec.tocDigest);
        // the background pass reads these bytes too: from here, not the registry
        if (saved.bytes.length <= MAX_HELD_TAIL) blob.holdTail(saved.start, saved.bytes);
        return index;
      } catch (err) {
        if (signal.aborted) throw err;
        this.logger.warn({ ...ctx, err }, 'saved TOC cannot be used; reading it again');
      }
    }
    const rec = new RecordingReader(blob);
    const opts: OpenLayerOptions = { expectedTocDigest: spec.tocDigest, signal };
    if (turns !== undefined) opts.turns = turns;
    if (spec.tocOffsetHint !== undefined) opts.tocOffsetHint = spec.tocOffsetHint;
    // the one TOC digest check: the index exists only if the TOC is the one the image names
    const index = (await this.openLayer(rec, opts)).verify(spec.tocDigest);
    // the end of the blob read for the TOC (the TOC's first read takes some data before it)
    // answers later reads of those bytes: fetched once
    const readFrom = rec.tailStart();
    const readTail = readFrom < spec.blobSize ? rec.tail(readFrom) : undefined;
    if (readTail !== undefined && readTail.length <= MAX_HELD_TAIL) blob.holdTail(readFrom, readTail);
    // Saved off the lookup's path (a disk write: 10-70 ms of a resolution on a busy disk): the
    // layer is servable without it, and a restart before it lands reads the TOC from the registry.
    const save = this.save(spec, index, rec, blob, signal).finally(() => this.saving.delete(save));
    this.saving.add(save);
    return index;
  }

  /** Resolves once every TOC save started so far has finished (store shutdown). */
  async idle(): Promise<void> {
    // a resolution finishing meanwhile may start another save
    while (this.saving.size > 0) await Promise.all([...this.saving]);
  }

  /** What the format reader needs again, from the TOC (zstd: its frame header) to the end. */
  private async save(
    spec: TocSpec,
    index: LayerIndex,
    rec: RecordingReader,
    blob: LazyBlob,
    signal: AbortSignal,
  ): Promise<void> {
    const start = Math.max(0, index.tocOffset - (index.compression === 'zstd' ? FRAME_HEADER : 0));
    try {
      // the resolve's signal no longer aborts once answered: this read gets a deadline of its own
      const bytes =
        rec.tail(start) ??
        (await withDeadline(SAVE_READ_MS, (s) => blob.read(start, spec.blobSize - start, s), {
          signal,
          what: 'TOC save read',
        }));
      await this.meta.putTocTail({ blobDigest: spec.blobDigest, blobSize: spec.blobSize, start, bytes });
    } catch (err) {
      // still servable now; a restart then needs the registry for the TOC
      if (!signal.aborted)
        this.logger.warn({ ref: spec.ref, digest: spec.blobDigest, err }, 'cannot save the verified TOC');
    }
  }
}
