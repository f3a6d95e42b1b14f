/**
 * The synthetic image of the first-lookup rehearsal (rehearsal.ts) and its saved text form. The
 * store loads the saved copy (rehearsal-image-data.ts); the builder (rehearsal-image-build.ts, the
 * store's own writer) is used only by `node scripts/rehearsal-image.js` and the unit test that checks
 * the copy, so a serving store never loads the writer and its compressors (building the image at
 * start-up cost +20 MB of resident memory).
 */

export interface RehearsalLayer {
  digest: string;
  /** A regular file of several chunks, read whole by the rehearsal. */
  chunkedFile: string;
}

export interface RehearsalImage {
  manifest: Buffer;
  /** Blobs by digest (config and layers). */
  blobs: Map<string, Buffer>;
  layers: RehearsalLayer[];
}

/** The saved image as text (what rehearsal-image-data.ts holds). */
export interface SavedRehearsalImage {
  manifest: string;
  /** [digest, base64 bytes] */
  blobs: Array<[string, string]>;
  layers: RehearsalLayer[];
}

export function saveRehearsalImage(image: RehearsalImage): SavedRehearsalImage {
  return {
    manifest: image.manifest.toString('utf8'),
    blobs: [...image.blobs].map(([digest, bytes]) => [digest, bytes.toString('base64')]),
    layers: image.layers,
  };
}

export function loadRehearsalImage(saved: SavedRehearsalImage): RehearsalImage {
  return {
    manifest: Buffer.from(saved.manifest, 'utf8'),
    blobs: new Map(saved.blobs.map(([digest, b64]) => [digest, Buffer.from(b64, 'base64')])),
    layers: saved.layers,
  };
}
