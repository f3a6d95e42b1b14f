import type { ReadAheadPolicy } from '../layer/read-ahead.js';
import { silentLogger, type Logger } from '../util/logger.js';
import type { VirtualFs } from '../fs/vfs.js';
import type { AccessLog } from './access-log.js';
import type { CreateLayerFn, OpenLayerFn, StoreRegistry } from './deps.js';
import { InoAllocator } from './ino.js';
import { MetaStore } from './meta-store.js';
import { LayerResolver, RESOLVER_DEFAULTS } from './resolver.js';
import { StoreFs, type StoreDeadlines } from './store-fs.js';
import { DEADLINE_DEFAULTS_SEC, IDLE_LAYER_TTL_SEC } from '../util/defaults.js';
import { holdResolved } from './pins-hold.js';
import type { HeldLayer } from './pins.js';
import { parseReference } from '../registry/reference.js';
import { parseDigest } from '../util/digest.js';
import { LayerRefsWriter, UseCounts, loadLayerRefs, useKey } from './layer-refs.js';
import { diskLayerRows, mergeStatus } from './disk-status.js';

/** One line of `stargz-store status`. */
export interface LayerStatus {
  ref: string;
  digest: string;
  tocDigest?: string;
  blobDigest?: string;
  format?: string;
  /** 'blob' = OLD client lookup by layer digest, 'toc' = NEW client lookup by TOC digest. */
  matchedBy?: 'blob' | 'toc';
  lazy: boolean;
  /** Why not lazy (or 'resolving'). */
  reason?: string;
  bytesFetched: number;
  /** Compressed blob size, when known (from the layer's record on disk). */
  totalBytes?: number;
  percent: number;
  verified: boolean;
  lastError?: string;
  refs: number;
}

/**
 * The one options object of the store layer: `createLayerStore` (index.ts) takes it too, adding only
 * how to build layers from the real registry client and cache. Defaults come from util/defaults.ts,
 * the same constants the config schema declares; `[deadlines]` etc. arrive here from serve-command.ts.
 */
export interface LayerStoreOptions {
  /** State root (`--root`); records go where util/root-layout.ts says (`metadata/`). */
  root: string;
  registry: StoreRegistry;
  openLayer: OpenLayerFn;
  createLayer: CreateLayerFn;
  logger?: Logger;
  /** Receives helper-channel credentials (the registry client's memory provider). */
  credentials?: { addCredentials(map: unknown): number };
  /**
   * lookupMs: diff/info/blob resolution budget; readMs: one read; syntheticMs: I/O-free nodes;
   * fuseMs: hard limit of any other FUSE operation (default max(lookupMs, readMs) + 5 s).
   */
  deadlines?: Partial<StoreDeadlines>;
  /** How long "not lazily servable" answers are remembered (never for saved names). */
  negativeTtlMs?: number;
  /** An unused layer (no use count, no open file) is closed after this long idle. */
  idleTtlMs?: number;
  /** At most this many unused layers stay open (default 32). */
  maxIdleLayers?: number;
  /** Names remembered beyond the ones in use or resolving (default 10 000). */
  maxNames?: number;
  /** Cap on one background resolution (default max(60 s, 2 x lookupMs)). */
  resolveTimeoutMs?: number;
  /** Start prefetch + background fetch when a layer resolves (default true). */
  startLayers?: boolean;
  /** Sequential read-ahead per open file (src/layer/read-ahead.ts); false turns it off. */
  readAhead?: Partial<ReadAheadPolicy> | false;
  /** Record first opens of diff files (`[debug] record_accesses`); the store closes (flushes) it in close(). */
  accessLog?: AccessLog;
  /** Where layers keep their verified-DiffID state (status after a restart reads it). */
  stateDir?: string;
  /** Compressed bytes held locally for a blob (status of an unverified layer after a restart). */
  coverage?: (blobDigest: string) => Promise<number | undefined>;
}

/** @deprecated name kept for imports; the store has one options object. */
export type CoreStoreOptions = LayerStoreOptions;

export const DEFAULT_DEADLINES: StoreDeadlines = {
  lookupMs: DEADLINE_DEFAULTS_SEC.lookup * 1000,
  readMs: DEADLINE_DEFAULTS_SEC.read * 1000,
  syntheticMs: 2_000,
  fuseMs: DEADLINE_DEFAULTS_SEC.fuse * 1000,
};

/**
 * The Additional Layer Store without the mount: resolution, use/release counting, status. `vfs` is
 * what the FUSE adapter serves.
 */
export class LayerStore {
  readonly vfs: VirtualFs;
  private readonly resolver: LayerResolver;
  private readonly refcounts = new UseCounts();
  private readonly log: Logger;
  /** Use counts survive a restart (layer-refs.ts); loaded once, added to any counted meanwhile. */
  private readonly refsWriter: LayerRefsWriter;
  private readonly refsLoaded: Promise<void>;

  constructor(private readonly o: LayerStoreOptions) {
    this.log = o.logger ?? silentLogger;
    this.refsWriter = new LayerRefsWriter(o.root, this.log);
    this.refsLoaded = loadLayerRefs(o.root).then((saved) => this.refcounts.load(saved));
    const deadlines = { ...DEFAULT_DEADLINES, ...o.deadlines };
    // the FUSE limit must leave the store's own deadlines room to answer first
    if (o.deadlines?.fuseMs === undefined) {
      deadlines.fuseMs = Math.max(deadlines.lookupMs, deadlines.readMs) + 5000;
    }
    const ino = new InoAllocator();
    this.resolver = new LayerResolver({
      registry: o.registry,
      openLayer: o.openLayer,
      createLayer: o.createLayer,
      meta: new MetaStore(o.root),
      ino,
      logger: this.log,
      negativeTtlMs: o.negativeTtlMs ?? DEADLINE_DEFAULTS_SEC.negativeTtl * 1000,
      resolveTimeoutMs: o.resolveTimeoutMs ?? Math.max(60_000, deadlines.lookupMs * 2),
      startLayers: o.startLayers ?? true,
      inUse: (ref, digest) => this.refs(ref, digest) > 0,
      idleTtlMs: o.idleTtlMs ?? IDLE_LAYER_TTL_SEC * 1000,
      // at least one: a layer that just resolved must not be closed under its first user
      maxIdleLayers: Math.max(1, o.maxIdleLayers ?? RESOLVER_DEFAULTS.maxIdleLayers),
      maxEntries: o.maxNames ?? RESOLVER_DEFAULTS.maxEntries,
    });
    this.vfs = new StoreFs(
      this.resolver,
      { use: (r, d) => this.use(r, d), release: (r, d) => this.release(r, d) },
      deadlines,
      this.log,
      o.accessLog,
      o.readAhead,
    );
  }

  private use(ref: string, digest: string): void {
    const n = this.refcounts.use(ref, digest);
    this.log.info({ ref, digest, refs: n }, 'layer marked as in use');
    this.saveRefs();
  }

  private release(ref: string, digest: string): void {
    const n = this.refcounts.release(ref, digest);
    this.log.info({ ref, digest, refs: n ?? 0, tracked: n !== undefined }, 'layer released');
    if (n !== undefined) this.saveRefs();
  }

  private saveRefs(): void {
    void this.refsLoaded.then(() => this.refsWriter.save(this.refcounts.entries()));
  }

  /** status() plus what the root knows of layers not looked up since this start (disk-status.ts). */
  async statusWithDisk(): Promise<LayerStatus[]> {
    await this.refsLoaded;
    const disk = await diskLayerRows({
      root: this.o.root,
      ...(this.o.stateDir !== undefined ? { stateDir: this.o.stateDir } : {}),
      ...(this.o.coverage !== undefined ? { coverage: this.o.coverage } : {}),
      refs: (r, d) => this.refs(r, d),
    });
    return mergeStatus(this.status(), disk);
  }

  /** Reference count of one (ref, digest), as signalled by use/rmdir. */
  refs(ref: string, digest: string): number {
    return this.refcounts.get(ref, digest);
  }

  status(): LayerStatus[] {
    const out: LayerStatus[] = [];
    const seen = new Set<string>();
    for (const e of this.resolver.allEntries()) {
      const key = useKey(e.ref, e.digest);
      seen.add(key);
      const refs = this.refcounts.get(e.ref, e.digest);
      const r = e.resolved;
      if (r) {
        const st = r.handle.layer.state();
        const s: LayerStatus = {
          ref: e.ref,
          digest: e.digest,
          tocDigest: r.record.tocDigest,
          blobDigest: r.record.blobDigest,
          format: r.handle.index.format,
          matchedBy: r.record.matchedBy,
          lazy: true,
          bytesFetched: st.bytesFetched,
          percent: st.percent,
          verified: st.verified,
          refs,
        };
        if (st.lastError) s.lastError = st.lastError;
        out.push(s);
      } else {
        const s: LayerStatus = {
          ref: e.ref,
          digest: e.digest,
          lazy: false,
          reason: e.failure ? e.failure.error.reason : e.inflight ? 'resolving' : 'not resolved',
          bytesFetched: 0,
          percent: 0,
          verified: false,
          refs,
        };
        if (e.lastError) s.lastError = e.lastError;
        out.push(s);
      }
    }
    for (const c of this.refcounts.entries()) {
      if (seen.has(useKey(c.ref, c.digest))) continue;
      out.push({
        ref: c.ref,
        digest: c.digest,
        lazy: false,
        reason: 'not resolved',
        bytesFetched: 0,
        percent: 0,
        verified: false,
        refs: c.n,
      });
    }
    return out;
  }

  /** Resolve `(ref, digest)` and hold it open, its chunks pinned, until release() (pinned images). */
  async holdLayer(ref: string, digest: string, waitMs = 120_000): Promise<HeldLayer> {
    // pinned names come from the pins file: parsed here, the store's edge for them
    const layer = await this.resolver.resolve(parseReference(ref), parseDigest(digest), waitMs);
    return holdResolved(layer);
  }

  /** Credentials from the helper channel, passed to the registry client. */
  addCredentials(map: unknown): number {
    if (!this.o.credentials) return 0;
    return this.o.credentials.addCredentials(map);
  }

  /** Resolves once the layer records written so far are on disk (they follow the answers). */
  recordsSaved(): Promise<void> {
    return this.resolver.recordsSaved();
  }

  /** Names remembered, layers open, use counts held (memory bounds; tests and status). */
  counts(): { names: number; layers: number; refcounts: number } {
    return { ...this.resolver.counts(), refcounts: this.refcounts.size };
  }

  async close(): Promise<void> {
    try {
      await this.resolver.close();
    } finally {
      await this.refsWriter.flush();
      await this.o.accessLog?.close();
    }
  }
}
