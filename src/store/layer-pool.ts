import type { LayerIndex } from '../format/model.js';
import { StoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { RangeReader } from '../util/range-reader.js';
import { firstReadStart } from '../format/open-layer.js';
import { LazyBlob } from './blob-source.js';
import type { CreateLayerFn, LazyLayerLike, StoreRegistry } from './deps.js';
import { DiffView } from './diff-view.js';
import type { InoAllocator } from './ino.js';
import { isDemanded, type Entry } from './name-table.js';
import { ParseGate } from './parse-gate.js';
import type { TocSpec, TocTails } from './toc-tail.js';
import type { ImageRef } from '../registry/reference.js';
import type { Digest } from '../util/digest.js';

/** One opened blob, shared by every `(ref, digest)` name that points at it (whatever the ref). */
export interface LayerHandle {
  /** The reference whose repository the blob is fetched from (the first name that opened it). */
  ref: string;
  blobDigest: string;
  /** `dropTail`: forget the TOC tail held in memory (LazyBlob). */
  blob: RangeReader & { dropTail?(): void };
  index: LayerIndex;
  view: DiffView;
  layer: LazyLayerLike;
  /** Keep the handle open while a file of it is open; call the returned function on release. */
  pin(): () => void;
}

export interface HandleSpec extends TocSpec {
  /** `ref` as parsed (the blob is fetched from its repository). */
  image: ImageRef;
  blobDigest: Digest;
  diffId?: string;
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
  /** Prefetch + background fetch started (once a client asked for a name of it). */
  started: boolean;
  /** Names waiting for this blob to open: its TOC parse is demanded if a client waits on one. */
  openers: Set<Entry>;
}

export interface LayerPoolOptions {
  registry: StoreRegistry;
  createLayer: CreateLayerFn;
  tocs: TocTails;
  ino: InoAllocator;
  logger: Logger;
  /** Start prefetch + background fetch when a client first asks for the layer. */
  startLayers: boolean;
  /** An idle layer (not used, no open file) is closed after this long without access. */
  idleTtlMs: number;
  /** At most this many idle layers stay open (least recently used are closed first). */
  maxIdleLayers: number;
  /** Is a name still used (resolving, or held by the client)? Its layer stays open. */
  nameBusy(e: Entry): boolean;
  /** The layer of these names was closed: they no longer resolve to it. */
  onClosed(names: Iterable<Entry>): void;
}

/** A tail read ahead of its resolution is kept this long for it (resolutions take well under). */
const EARLY_BLOB_MS = 60_000;

/** Any of the parser's own TOC hashes equals the expected digest: the TOC bytes are the promised ones. */
function tocMatches(index: LayerIndex, expected: string): boolean {
  return (
    expected === index.tocDigest || expected === index.tocJsonDigest || expected === index.manifestChecksum
  );
}

/**
 * The open blobs: one per blob digest, shared by every name and ref that points at it, kept open
 * while used (names in use, open files, resolutions waiting) and closed when idle for idleTtlMs or
 * beyond maxIdleLayers.
 */
export class LayerPool {
  private readonly slots = new Map<string, Slot>();
  /** Blobs whose TOC read started before their resolution opened them (prefetchTail). */
  private readonly early = new Map<string, { blob: LazyBlob; ref: string; at: number }>();
  /** Parses of layers a client waits for go first (resolved-ahead ones pause meanwhile). */
  private readonly parses = new ParseGate();
  private readonly sweepTimer: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly o: LayerPoolOptions) {
    this.sweepTimer = setInterval(
      () => this.sweepIdle(),
      Math.max(1000, Math.min(30_000, Math.floor(o.idleTtlMs / 2))),
    );
    this.sweepTimer.unref();
  }

  get size(): number {
    return this.slots.size;
  }

  /** A client waits on a resolution until `release()`: parses nobody waits for yield to it. */
  demand(): () => void {
    return this.parses.demand();
  }

  /** Mark a layer as just used (idle sweeping goes by last use). */
  touch(h: LayerHandle): void {
    const slot = this.slots.get(h.blobDigest);
    if (slot) slot.lastUsed = Date.now();
  }

  /** Remove a name from the layer it resolved to (the layer may become idle). */
  detach(e: Entry, h: LayerHandle): void {
    this.slots.get(h.blobDigest)?.names.delete(e);
  }

  /**
   * A client asked for a name of this layer: start its prefetch and background fetch (once). Layers
   * resolved ahead of the client wait for this, so that work never competes with the layers the
   * client is actually pulling.
   */
  activate(h: LayerHandle): void {
    const slot = this.slots.get(h.blobDigest);
    if (!this.o.startLayers || !slot || slot.handle !== h || slot.started) return;
    slot.started = true;
    try {
      h.layer.start?.();
    } catch (err) {
      this.o.logger.warn({ ref: h.ref, blobDigest: h.blobDigest, err }, 'cannot start background fetch');
      return;
    }
    // the held TOC tail (up to MAX_HELD_TAIL per layer) serves reads of the blob's last bytes
    // until the layer is fully verified: then every chunk is in the cache, and the memory goes.
    // (Asked only once started: before that the layer has no background pass to wait for.)
    const dropIfVerified = (): void => {
      if (h.layer.state().verified) h.blob.dropTail?.();
    };
    void h.layer.whenBackgroundDone?.().then(dropIfVerified, dropIfVerified);
  }

  /** The opened blob for `spec` (opening it once for every name and ref that points at it). */
  async handleFor(spec: HandleSpec, e: Entry, signal: AbortSignal): Promise<LayerHandle> {
    for (;;) {
      const slot = this.slots.get(spec.blobDigest) ?? this.openSlot(spec, signal);
      slot.waiters++;
      slot.openers.add(e);
      let h: LayerHandle;
      try {
        h = await slot.promise;
      } finally {
        slot.waiters--;
        slot.openers.delete(e);
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
      started: false,
      openers: new Set(),
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

  /**
   * The manifest names this blob and its resolution is about to follow: start the TOC's first read
   * now, while the resolution still fetches the image config (one round trip less per layer on a
   * slow link). The blob is taken by the resolution's open; one never taken is dropped after
   * EARLY_BLOB_MS (it held at most one first read).
   */
  prefetchTail(image: ImageRef, blobDigest: Digest, blobSize: number, tocOffsetHint?: number): void {
    if (this.closed || this.slots.has(blobDigest) || this.early.has(blobDigest)) return;
    const now = Date.now();
    for (const [digest, early] of this.early) if (now - early.at > EARLY_BLOB_MS) this.early.delete(digest);
    const blob = this.newBlob(image, blobDigest, blobSize);
    blob.prefetchTail(firstReadStart(blobSize, tocOffsetHint === undefined ? {} : { tocOffsetHint }));
    this.early.set(blobDigest, { blob, ref: image.toString(), at: now });
  }

  private newBlob(image: ImageRef, blobDigest: Digest, blobSize: number): LazyBlob {
    return new LazyBlob(blobSize, (s) => this.o.registry.openBlob(image, blobDigest, blobSize, s), {
      ref: image.toString(),
      digest: blobDigest,
    });
  }

  private async openHandle(spec: HandleSpec, slot: Slot, signal: AbortSignal): Promise<LayerHandle> {
    const { ref, blobDigest } = spec;
    const early = this.early.get(blobDigest);
    this.early.delete(blobDigest);
    const blob =
      early !== undefined && early.blob.size === spec.blobSize && early.ref === spec.image.toString()
        ? early.blob
        : this.newBlob(spec.image, blobDigest, spec.blobSize);
    const turns = this.parses.turns(
      () => [...slot.openers].some(isDemanded),
      (ms) => {
        for (const e of slot.openers) e.heldMs = (e.heldMs ?? 0) + ms;
      },
    );
    const index = await this.o.tocs.open(spec, blob, signal, turns);
    const logger = this.o.logger.child({ ref, blob: blobDigest });
    const args = { ref, blobDigest, index, blob, logger };
    const layer = this.o.createLayer(spec.diffId ? { ...args, diffId: spec.diffId } : args);
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

  /** Close idle layers: unused for idleTtlMs, or beyond maxIdleLayers (least recently used first). */
  sweepIdle(): void {
    if (this.closed) return;
    const now = Date.now();
    const idle: Slot[] = [];
    for (const s of this.slots.values()) {
      if (!s.handle || s.closed || s.opens > 0 || s.waiters > 0) continue;
      let used = false;
      for (const e of s.names) {
        if (this.o.nameBusy(e)) {
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
    this.o.onClosed(s.names);
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
    this.early.clear();
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
    // TOCs still being saved land before the store says it stopped
    await this.o.tocs.idle();
  }
}
