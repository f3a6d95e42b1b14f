import { mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { writeFileAtomic } from '../util/atomic-file.js';
import { StoreError, asStoreError } from '../util/errors.js';
import { formatBytes } from '../util/format-bytes.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { rootLayout } from '../util/root-layout.js';

/**
 * Pinned image sets: images fetched completely ahead of time, verified (chunks and DiffID) and kept
 * out of cache eviction, so a node can start them without the registry.
 *
 * Per image: `pending` (queued) -> `fetching` (bytes, percent) -> `pinned`, or `failed` (error).
 * The set and each image's layer list live in `<root>/pins.json` (atomic writes), so after a
 * restart every pin is resumed from the saved layer list: no manifest, hence no registry, is
 * needed; records, TOCs and chunks are on disk already. Before anything is fetched, `add` checks
 * that the cache filesystem has at least twice the uncompressed bytes still to fetch free, and
 * refuses (nothing saved, nothing fetched) when it does not.
 */

export type PinState = 'pending' | 'fetching' | 'pinned' | 'failed';

export interface PinLayer {
  digest: string;
  /** Compressed size. */
  size: number;
  lazy: boolean;
  /** Why not lazy (the layer is then not pinned: the runtime pulls it normally). */
  reason?: string;
  /** Uncompressed size when the image says (annotation), else an estimate (see `estimated`). */
  uncompressedSize: number;
  estimated?: boolean;
}

export interface PinRecord {
  ref: string;
  platform?: string;
  state: PinState;
  error?: string;
  layers: PinLayer[];
  addedAt: string;
}

export interface PinStatus extends PinRecord {
  bytesFetched: number;
  totalBytes: number;
  percent: number;
}

/** One layer resolved through the store and held open, its chunks pinned in the cache. */
export interface HeldLayer {
  state(): {
    bytesFetched: number;
    totalBytes: number;
    percent: number;
    fullyVerified: boolean;
    lastError?: string;
  };
  /** Resolves when the layer's background pass (fetch + verify) ended, either way. */
  whenDone(): Promise<void>;
  release(): void;
}

/** What `add` learns about an image from its registry (manifest of the chosen platform). */
export interface PinImageInfo {
  layers: Array<{
    digest: string;
    size: number;
    mediaType: string;
    lazy: boolean;
    uncompressedSize?: number;
  }>;
}

export interface PinManagerDeps {
  root: string;
  resolveImage(ref: string, platform: string | undefined): Promise<PinImageInfo>;
  holdLayer(ref: string, digest: string): Promise<HeldLayer>;
  /** Free bytes on the cache filesystem. */
  freeBytes(): Promise<number>;
  /** Uncompressed bytes of a layer already verified and cached (0 when unknown). */
  cachedBytes?(ref: string, digest: string): number;
  logger?: Logger;
}

/** When the image does not say, assume a layer expands to this many times its compressed size. */
export const UNCOMPRESSED_ESTIMATE_FACTOR = 3;

export function pinsFile(root: string): string {
  return rootLayout(root).pins;
}

export class PinManager {
  private readonly pins = new Map<string, PinRecord>();
  private readonly held = new Map<string, HeldLayer[]>();
  private readonly log: Logger;
  private queue: Promise<void> = Promise.resolve();
  private closed = false;
  private saving: Promise<void> = Promise.resolve();

  constructor(private readonly d: PinManagerDeps) {
    this.log = d.logger ?? silentLogger;
  }

  /** Loads `pins.json` and resumes every pin that is not `failed`. */
  async load(): Promise<void> {
    let text: string;
    try {
      text = await readFile(pinsFile(this.d.root), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw asStoreError(err, 'E_IO', { path: pinsFile(this.d.root) });
    }
    let list: PinRecord[];
    try {
      list = (JSON.parse(text) as { pins: PinRecord[] }).pins;
      if (!Array.isArray(list)) throw new Error('no pins array');
    } catch (err) {
      throw new StoreError('E_CONFIG', `${pinsFile(this.d.root)} is damaged: ${(err as Error).message}`, {
        path: pinsFile(this.d.root),
      });
    }
    for (const p of list) {
      if (typeof p?.ref !== 'string' || !Array.isArray(p.layers)) continue;
      this.pins.set(p.ref, { ...p, state: p.state === 'failed' ? 'failed' : 'pending' });
    }
    for (const p of this.pins.values()) if (p.state === 'pending') this.enqueue(p.ref);
  }

  /**
   * Adds images (resolving each manifest now: the disk check needs the layer sizes). Refuses the
   * whole request with E_TOO_LARGE when the cache filesystem lacks 2x the uncompressed bytes still
   * to fetch; nothing is saved then.
   */
  async add(refs: string[], platform?: string): Promise<PinStatus[]> {
    const fresh: PinRecord[] = [];
    for (const ref of refs) {
      const existing = this.pins.get(ref);
      if (existing !== undefined && existing.state !== 'failed') continue;
      const info = await this.d.resolveImage(ref, platform);
      fresh.push({
        ref,
        ...(platform !== undefined ? { platform } : {}),
        state: 'pending',
        addedAt: new Date().toISOString(),
        layers: info.layers.map((l) => {
          const estimated = l.uncompressedSize === undefined;
          const layer: PinLayer = {
            digest: l.digest,
            size: l.size,
            lazy: l.lazy,
            uncompressedSize: l.uncompressedSize ?? l.size * UNCOMPRESSED_ESTIMATE_FACTOR,
          };
          if (estimated) layer.estimated = true;
          if (!l.lazy) layer.reason = `not lazy (${l.mediaType} without a TOC): pulled normally; convert it`;
          return layer;
        }),
      });
    }
    const needed = fresh.reduce(
      (sum, p) =>
        sum +
        p.layers
          .filter((l) => l.lazy)
          .reduce(
            (s, l) => s + Math.max(0, l.uncompressedSize - (this.d.cachedBytes?.(p.ref, l.digest) ?? 0)),
            0,
          ),
      0,
    );
    const free = await this.d.freeBytes();
    if (free < 2 * needed) {
      throw new StoreError(
        'E_TOO_LARGE',
        `not enough free space to pin ${fresh.map((p) => p.ref).join(', ')}: ${formatBytes(free)} free, ` +
          `${formatBytes(2 * needed)} needed (twice the ${formatBytes(needed)} still to fetch, uncompressed)`,
        { free, needed },
      );
    }
    for (const p of fresh) this.pins.set(p.ref, p);
    await this.save();
    for (const p of fresh) this.enqueue(p.ref);
    return refs.map((r) => this.statusOf(this.pins.get(r)!));
  }

  /** Removes pins: their chunks become evictable again. Unknown refs are named in the error. */
  async remove(refs: string[]): Promise<number> {
    const unknown = refs.filter((r) => !this.pins.has(r));
    if (unknown.length > 0) {
      throw new StoreError('E_NOT_FOUND', `not pinned: ${unknown.join(', ')}`);
    }
    for (const r of refs) {
      this.pins.delete(r);
      this.releaseHeld(r);
    }
    await this.save();
    return refs.length;
  }

  list(): PinStatus[] {
    return [...this.pins.values()].map((p) => this.statusOf(p));
  }

  /** Pinned images per state (for `stargz_store_pinned_images`). */
  counts(): Record<PinState, number> {
    const c: Record<PinState, number> = { pending: 0, fetching: 0, pinned: 0, failed: 0 };
    for (const p of this.pins.values()) c[p.state]++;
    return c;
  }

  /** Resolves once every queued pin has settled (pinned or failed) and been saved. */
  async idle(): Promise<void> {
    let q: Promise<void>;
    do {
      q = this.queue;
      await q;
      await this.saving;
    } while (q !== this.queue);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const r of [...this.held.keys()]) this.releaseHeld(r);
    await this.saving;
  }

  private statusOf(p: PinRecord): PinStatus {
    let fetched = 0;
    let total = 0;
    const held = this.held.get(p.ref) ?? [];
    for (const h of held) {
      const s = h.state();
      total += s.totalBytes;
      fetched += Math.min(s.totalBytes, (s.totalBytes * s.percent) / 100);
    }
    if (held.length === 0) total = p.layers.filter((l) => l.lazy).reduce((s, l) => s + l.size, 0);
    if (p.state === 'pinned') fetched = total;
    const percent = total === 0 ? (p.state === 'pinned' ? 100 : 0) : (fetched / total) * 100;
    return {
      ...p,
      bytesFetched: Math.round(fetched),
      totalBytes: total,
      percent: Math.round(percent * 10) / 10,
    };
  }

  private enqueue(ref: string): void {
    this.queue = this.queue.then(() => this.fetch(ref)).catch(() => undefined);
  }

  private releaseHeld(ref: string): void {
    for (const h of this.held.get(ref) ?? []) h.release();
    this.held.delete(ref);
  }

  /** Resolve every lazy layer through the store, hold it, wait for fetch + verification. */
  private async fetch(ref: string): Promise<void> {
    const p = this.pins.get(ref);
    if (p === undefined || this.closed || p.state !== 'pending') return;
    p.state = 'fetching';
    delete p.error;
    await this.save();
    try {
      this.releaseHeld(ref);
      const held: HeldLayer[] = [];
      this.held.set(ref, held);
      for (const l of p.layers) {
        if (!l.lazy) continue;
        held.push(await this.d.holdLayer(ref, l.digest));
      }
      await Promise.all(held.map((h) => h.whenDone()));
      if (this.pins.get(ref) !== p) return; // removed meanwhile
      const bad = p.layers
        .filter((l) => l.lazy)
        .map((l, i) => ({ l, s: held[i]!.state() }))
        .filter(({ s }) => !s.fullyVerified);
      if (bad.length > 0) {
        const { l, s } = bad[0]!;
        throw new StoreError(
          'E_LAYER_BAD',
          `layer ${l.digest} not fully fetched and verified (${s.percent.toFixed(1)}%)${s.lastError ? `: ${s.lastError}` : ''}`,
        );
      }
      p.state = 'pinned';
      this.log.info({ ref, layers: held.length }, 'image pinned');
    } catch (err) {
      if (this.pins.get(ref) !== p) return;
      p.state = 'failed';
      p.error = asStoreError(err).message;
      this.log.warn({ ref, err: asStoreError(err) }, 'pinning failed');
    }
    await this.save();
  }

  private save(): Promise<void> {
    // after close nothing is written: the root may be going away, and pins resume from the last save
    if (this.closed) return this.saving;
    const body = `${JSON.stringify({ version: 1, pins: [...this.pins.values()] }, null, 1)}\n`;
    // writes in order; a failed write is logged and retried by the next change
    this.saving = this.saving.then(() =>
      saveFile(pinsFile(this.d.root), body).catch((err: unknown) =>
        this.log.error({ err: asStoreError(err) }, 'cannot save pins.json'),
      ),
    );
    return this.saving;
  }
}

async function saveFile(path: string, data: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await writeFileAtomic(path, data);
}
