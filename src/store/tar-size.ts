import type { LayerIndex } from '../format/model.js';

const pad = (n: number) => Math.ceil(n / 512) * 512;

/**
 * A best-effort uncompressed tar size from the TOC, used for the OLD `info` diff-size only when the
 * layer has no `io.containers.estargz.uncompressed-size` annotation and no full fetch measured it.
 * Exact for plain ustar entries; PAX/GNU long-name records are approximated, so treat it as an
 * estimate (containers/storage only shows it in `podman images` sizes).
 */
export function estimateTarSize(index: LayerIndex): number {
  let total = 0;
  for (const n of index.nodes) {
    if (!n || n === index.root) continue;
    const names = n.type === 'reg' ? Math.max(1, n.nlink) : 1;
    let header = 512;
    if (Buffer.byteLength(n.path) > 100) header += 512 + pad(Buffer.byteLength(n.path) + 1);
    if (Buffer.byteLength(n.linkName) > 100) header += 512 + pad(Buffer.byteLength(n.linkName) + 1);
    if (n.xattrs.size > 0) {
      let rec = 0;
      for (const [k, v] of n.xattrs) rec += 32 + Buffer.byteLength(k) + v.length;
      header += 512 + pad(rec);
    }
    total += header * names;
    if (n.type === 'reg') total += pad(n.size);
  }
  return total + 1024;
}
