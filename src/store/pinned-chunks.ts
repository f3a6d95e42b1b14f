import { readFile } from 'node:fs/promises';
import type { ChunkCache } from '../cache/chunk-cache.js';
import { isSha256Digest } from '../cache/paths.js';
import { openLayer } from '../format/open-layer.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { rootLayout } from '../util/root-layout.js';
import { OfflineBlob, TailReader } from './blob-source.js';
import { MetaStore } from './meta-store.js';
import type { PinRecord } from './pins.js';

/** The cache pin set that holds pins.json's chunks from start-up until the pins are held again. */
export const START_PINS = '(pins.json at start-up)';

/**
 * Chunk digests of every layer pins.json pins (images not `failed`), from what is on disk alone:
 * the layer records and their saved, verified TOCs (no registry). A layer whose record or TOC is
 * missing or bad is skipped (its chunks are fetched again when its pin resumes).
 */
export async function pinnedChunksOnDisk(root: string, logger: Logger = silentLogger): Promise<string[]> {
  let pins: PinRecord[];
  try {
    const parsed = JSON.parse(await readFile(rootLayout(root).pins, 'utf8')) as { pins?: unknown };
    pins = Array.isArray(parsed.pins) ? (parsed.pins as PinRecord[]) : [];
  } catch {
    return []; // no pins, or a damaged file (the pin manager reports that one)
  }
  const meta = new MetaStore(root);
  const out = new Set<string>();
  for (const p of pins) {
    if (typeof p?.ref !== 'string' || !Array.isArray(p.layers) || p.state === 'failed') continue;
    for (const l of p.layers) {
      if (l?.lazy !== true || typeof l.digest !== 'string') continue;
      try {
        const r = await meta.getLayer(p.ref, l.digest);
        const tail = r && (await meta.getTocTail(r.blobDigest, r.blobSize));
        if (!r || !tail) continue;
        const reader = new TailReader(new OfflineBlob(r.blobSize), tail.start, tail.bytes);
        const index = await openLayer(reader, {
          expectedTocDigest: r.tocDigest,
          tailGuessBytes: tail.bytes.length,
        });
        for (const n of index.nodes) {
          for (const c of n?.chunks ?? []) if (!c.zeros && isSha256Digest(c.digest)) out.add(c.digest);
        }
      } catch (err) {
        logger.debug({ err, ref: p.ref, digest: l.digest }, 'pinned layer not readable offline');
      }
    }
  }
  return [...out];
}

/**
 * Keep the chunks pins.json pins out of the cache's start-up trim (which enforces the bounds on
 * what the last run left) until the pin manager holds those layers again. Call right after
 * ChunkCache.open resolves, with the digests read before it: its scan trims only after reading the
 * disk, so the pin is in place first. Returns the release, for when every pin was resumed.
 */
export function holdStartPins(cache: ChunkCache, digests: readonly string[]): () => void {
  if (digests.length === 0) return () => undefined;
  cache.pin(START_PINS, digests);
  return () => cache.unpin(START_PINS);
}
