import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { adoptBlob, type LayerBlob } from './oci.js';

/**
 * Our eStargz / zstd:chunked writer (src/format/writer/index.ts), loaded at run time so the bench
 * tooling builds and its other modes run even while the writer is absent or broken: a missing writer
 * becomes a typed error for the formats that need it.
 */

export type LazyFormat = 'estargz' | 'zstd:chunked';

export interface WriterBuildOptions {
  format: LazyFormat;
  chunkSize?: number;
  prioritize?: string[];
}

export interface WriterBuildResult {
  tocDigest: string;
  diffID: string;
  uncompressedSize: number;
  size: number;
  blobDigest: string;
  mediaType: string;
  annotations: Record<string, string>;
}

export interface WriterModule {
  buildLayerToFile(inTarPath: string, outPath: string, opts: WriterBuildOptions): Promise<WriterBuildResult>;
}

// A variable specifier keeps tsc from resolving (and requiring) the module at build time.
const WRITER_MODULE = '../../src/format/writer/index.js';
let cached: Promise<WriterModule> | undefined;

export function loadWriter(): Promise<WriterModule> {
  cached ??= (async () => {
    let mod: Partial<WriterModule>;
    try {
      mod = (await import(WRITER_MODULE)) as Partial<WriterModule>;
    } catch (err) {
      throw new StoreError(
        'E_UNSUPPORTED_FORMAT',
        `our layer writer is not available: ${(err as Error).message}`,
        {
          path: WRITER_MODULE,
        },
      );
    }
    if (typeof mod.buildLayerToFile !== 'function') {
      throw new StoreError(
        'E_UNSUPPORTED_FORMAT',
        'src/format/writer/index.js does not export buildLayerToFile',
        {
          path: WRITER_MODULE,
        },
      );
    }
    return mod as WriterModule;
  })();
  return cached;
}

/** Encode one layer tar with our writer straight into an OCI layout. */
export async function writerLayerIntoLayout(
  layout: string,
  tarPath: string,
  opts: WriterBuildOptions,
): Promise<LayerBlob & { tocDigest: string }> {
  const writer = await loadWriter();
  const tmp = join(layout, 'blobs', `.tmp-${process.pid}-${Date.now()}`);
  let r: WriterBuildResult;
  try {
    r = await writer.buildLayerToFile(tarPath, tmp, opts);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await adoptBlob(layout, tmp, r.blobDigest);
  return {
    digest: r.blobDigest,
    size: r.size,
    mediaType: r.mediaType,
    diffID: r.diffID,
    annotations: r.annotations,
    tocDigest: r.tocDigest,
  };
}
