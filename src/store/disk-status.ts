import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { loadLayerState } from '../layer/state-file.js';
import { rootLayout } from '../util/root-layout.js';
import type { LayerStatus } from './layer-store.js';
import type { LayerRecord } from './record.js';
import type { BlobStore } from '../cache/blob-store.js';

/**
 * `status` after a restart: the resolver only knows layers looked up since this start, so the rows
 * of layers resolved by an earlier run come from what the root keeps: resolution records
 * (`metadata/layers`), the verified-DiffID state (`layer-state`), the compressed bytes kept for
 * unverified layers (coverage, optional) and the saved use counts. A live row wins, but never
 * shows less than the disk knows (a verified layer stays 100% verified across restarts).
 */
export interface DiskStatusSources {
  root: string;
  /** `layer-state` directory of the layers (unset: no DiffID state is kept). */
  stateDir?: string;
  /** Compressed bytes of a blob held locally (an unverified layer's fetched bytes), if known. */
  coverage?: (blobDigest: string) => Promise<number | undefined>;
  /** Current use count of a layer. */
  refs: (ref: string, digest: string) => number;
}

/** A row with the blob size it was measured against (the table's FETCHED total). */
export type DiskLayerStatus = LayerStatus & { totalBytes: number };

async function readRecords(dir: string): Promise<LayerRecord[]> {
  let names: string[];
  try {
    names = (await readdir(dir)).filter((n) => n.endsWith('.json')).sort();
  } catch {
    return [];
  }
  const out: LayerRecord[] = [];
  for (const n of names) {
    try {
      const r = JSON.parse(await readFile(join(dir, n), 'utf8')) as LayerRecord;
      if (r.version === 1 && typeof r.ref === 'string' && typeof r.digest === 'string') out.push(r);
    } catch {
      /* damaged or vanished: `check` names it; status just skips it */
    }
  }
  return out;
}

/** One row per resolution record on disk. */
export async function diskLayerRows(src: DiskStatusSources): Promise<DiskLayerStatus[]> {
  const rows: DiskLayerStatus[] = [];
  for (const r of await readRecords(rootLayout(src.root).metadataLayers)) {
    const size = Number.isSafeInteger(r.blobSize) && r.blobSize > 0 ? r.blobSize : 0;
    const state = src.stateDir !== undefined ? await loadLayerState(src.stateDir, r.blobDigest) : undefined;
    const verified = state?.fullyVerified === true && state.diffID === r.diffId;
    const held = verified ? size : Math.min(size, (await src.coverage?.(r.blobDigest)) ?? 0);
    const row: DiskLayerStatus = {
      ref: r.ref,
      digest: r.digest,
      tocDigest: r.tocDigest,
      blobDigest: r.blobDigest,
      matchedBy: r.matchedBy,
      lazy: true,
      bytesFetched: held,
      totalBytes: size,
      percent: verified ? 100 : size > 0 ? Math.floor((100 * held) / size) : 0,
      verified,
      refs: src.refs(r.ref, r.digest),
    };
    if (r.format !== undefined) row.format = r.format;
    rows.push(row);
  }
  return rows;
}

/** Live rows first (disk facts folded in), then the layers only the disk knows. */
export function mergeStatus(live: LayerStatus[], disk: DiskLayerStatus[]): LayerStatus[] {
  const known = new Map(disk.map((d) => [`${d.ref}\n${d.digest}`, d]));
  const out: LayerStatus[] = live.map((l) => {
    const d = known.get(`${l.ref}\n${l.digest}`);
    if (d === undefined) return l;
    known.delete(`${l.ref}\n${l.digest}`);
    // a use count restored for a layer not looked up since the start: the disk row, with that count
    if (!l.lazy && l.reason === 'not resolved') return { ...d, refs: l.refs };
    if (!l.lazy) return l;
    const verified = l.verified || d.verified;
    return {
      ...l,
      totalBytes: d.totalBytes,
      verified,
      percent: verified ? 100 : Math.max(l.percent, d.percent),
      bytesFetched: verified
        ? Math.max(l.bytesFetched, d.totalBytes)
        : Math.max(l.bytesFetched, d.bytesFetched),
    };
  });
  return [...out, ...known.values()];
}

/** Compressed bytes the blob store holds for a blob, from its saved coverage record. */
export function heldBlobBytes(blobs: Pick<BlobStore, 'loadRecord'>): DiskStatusSources['coverage'] {
  return async (blobDigest) => {
    const hex = /^sha256:([0-9a-f]{64})$/.exec(blobDigest)?.[1];
    if (hex === undefined) return undefined;
    const r = await blobs.loadRecord(hex);
    return r?.intervals.reduce((n, [start, end]) => n + (end - start), 0);
  };
}
