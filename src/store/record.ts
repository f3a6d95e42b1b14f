import type { Compression, LayerFormat } from '../format/model.js';
import type { LayerMatchKind } from '../registry/layer-match.js';

/**
 * Everything the store learned when it resolved `<ref>/<digest>`, persisted under `<root>` so the
 * same path resolves after a restart without the manifest (the tag may have moved since).
 */
export interface LayerRecord {
  version: 1;
  ref: string;
  /** The directory name the client looked up. */
  digest: string;
  /** 'blob': OLD client (Podman < 5.1, manifest layer digest); 'toc': NEW client (TOC digest). */
  matchedBy: LayerMatchKind;
  blobDigest: string;
  blobSize: number;
  mediaType: string;
  compression: Compression;
  format?: LayerFormat;
  /** The digest the TOC was verified against, and which annotation supplied it. */
  tocDigest: string;
  tocAnnotation: string;
  /** config.rootfs.diff_ids[i] of the manifest layer (untrusted until a full fetch verified it). */
  diffId: string;
  /**
   * Uncompressed tar size and where the number comes from: the uncompressed-size annotation, a
   * full fetch, the tar-split (current zstd:chunked), or an estimate from the TOC (see format/tar-size.ts).
   */
  diffSize: number;
  diffSizeSource: 'annotation' | 'measured' | 'tar-split' | 'toc-estimate';
  tocOffsetHint?: number;
  manifestDigest?: string;
  configDigest?: string;
  resolvedAt: string;
}

/** containers/storage `archive.Compression` values. */
export function compressionCode(c: Compression): number {
  return c === 'zstd' ? 4 : 2;
}

/**
 * The `info` file (containers/storage `Layer` JSON, compact, trailing newline). OLD form keyed by blob
 * digest: diff-digest is mandatory (it becomes the layer ID). NEW form keyed by TOC digest: toc-digest
 * must equal the looked-up name; no diff-digest/compressed-diff-digest because the full tar was not
 * verified (als-client.md §2.3, §2.6).
 */
export function buildInfo(r: LayerRecord): Buffer {
  const json =
    r.matchedBy === 'blob'
      ? {
          'compressed-diff-digest': r.blobDigest,
          'compressed-size': r.blobSize,
          'diff-digest': r.diffId,
          'diff-size': r.diffSize,
          compression: compressionCode(r.compression),
        }
      : {
          'diff-size': -1,
          compression: compressionCode(r.compression),
          'toc-digest': r.digest,
          flags: { 'expected-layer-diffid': r.diffId },
        };
  return Buffer.from(JSON.stringify(json) + '\n', 'utf8');
}
