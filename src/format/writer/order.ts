import { posix } from 'node:path';
import { StoreError } from '../../util/errors.js';
import { TYPE_LINK, cleanName, simpleFileHeader, type TarHeader } from './tar-header.js';
import type { TarEntry } from './tar-reader.js';

export const PREFETCH_LANDMARK = '.prefetch.landmark';
export const NO_PREFETCH_LANDMARK = '.no.prefetch.landmark';
export const TOC_TAR_NAME = 'stargz.index.json';
/** Landmark payload: one byte 0x0f (estargz `landmarkContents`). */
export const LANDMARK_CONTENT = Buffer.from([0x0f]);

/** An entry to write: from the input tar (payload at `dataOffset`) or synthesised (`inline`). */
export interface SourceItem {
  header: TarHeader;
  dataOffset: number;
  inline?: Buffer;
}

/** Insertion-ordered set of entries keyed by cleaned name (estargz `tarFile`). */
class EntrySet {
  private readonly byName = new Map<string, SourceItem>();
  add(item: SourceItem): void {
    const key = cleanName(item.header.name);
    this.byName.delete(key); // a repeated name moves to the end: last wins, at its position
    this.byName.set(key, item);
  }
  get(name: string): SourceItem | undefined {
    return this.byName.get(cleanName(name));
  }
  remove(name: string): void {
    this.byName.delete(cleanName(name));
  }
  items(): SourceItem[] {
    return [...this.byName.values()];
  }
}

export interface OrderOptions {
  prioritize?: string[];
  /** 'always': estargz (one of the two landmarks); 'prioritized': only `.prefetch.landmark` when prioritising. */
  landmark: 'always' | 'prioritized';
}

/**
 * estargz Build ordering (spec §1.3): drop existing landmarks and stargz.index.json, keep the last
 * of repeated names, move prioritised files (with parent directories and hardlink targets) first,
 * then the landmark, then everything else in input order.
 */
export function orderEntries(entries: TarEntry[], opts: OrderOptions): SourceItem[] {
  const input = new EntrySet();
  for (const e of entries) {
    const key = cleanName(e.header.name);
    if (key === PREFETCH_LANDMARK || key === NO_PREFETCH_LANDMARK || key === TOC_TAR_NAME) continue;
    input.add({ header: e.header, dataOffset: e.dataOffset });
  }
  const sorted = new EntrySet();
  const moveRec = (name: string, wanted: boolean, depth: number): void => {
    if (depth > 4096) throw new StoreError('E_BAD_ARCHIVE', 'hardlink chain too deep', { path: name });
    const key = cleanName(name);
    if (key === '') {
      const root = input.get('');
      if (root) {
        sorted.add(root);
        input.remove('');
      }
      return;
    }
    if (!input.get(key) && !sorted.get(key)) {
      // Only the prioritised file itself must exist; a missing parent directory entry is fine.
      if (wanted)
        throw new StoreError('E_NOT_FOUND', `prioritized file not found in the layer: ${name}`, {
          path: name,
        });
      return;
    }
    moveRec(posix.dirname('/' + key), false, depth + 1);
    const item = input.get(key);
    if (item && item.header.typeflag === TYPE_LINK) moveRec(item.header.linkname, false, depth + 1);
    const again = input.get(key);
    if (again) {
      sorted.add(again);
      input.remove(key);
    }
  };
  const prioritized = opts.prioritize ?? [];
  for (const p of prioritized) moveRec(p, true, 0);
  const out = sorted.items();
  if (prioritized.length > 0 || opts.landmark === 'always') {
    const name = prioritized.length > 0 ? PREFETCH_LANDMARK : NO_PREFETCH_LANDMARK;
    out.push({
      header: simpleFileHeader(name, LANDMARK_CONTENT.length),
      dataOffset: 0,
      inline: LANDMARK_CONTENT,
    });
  }
  return out.concat(input.items());
}
