/**
 * Layer writers: turn a tar (plain, gzip or zstd; buffer, stream or file) into an eStargz or a
 * zstd:chunked blob. Used by tests, benchmarks and image tooling — not on the FUSE serving path.
 */
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { StoreError, asStoreError } from '../../util/errors.js';
import {
  ESTARGZ_MEDIA_TYPE,
  TOC_DIGEST_ANNOTATION,
  UNCOMPRESSED_SIZE_ANNOTATION,
  writeEstargz,
} from './estargz.js';
import { openTarBuffer, openTarFile, openTarStream, type TarInput, type TarSource } from './input.js';
import { orderEntries } from './order.js';
import { BlobSink } from './sink.js';
import {
  MANIFEST_CHECKSUM_ANNOTATION,
  MANIFEST_POSITION_ANNOTATION,
  TARSPLIT_POSITION_ANNOTATION,
  ZSTD_MEDIA_TYPE,
  writeZstdChunked,
} from './zstd-chunked.js';

export {
  ESTARGZ_MEDIA_TYPE,
  TOC_DIGEST_ANNOTATION,
  UNCOMPRESSED_SIZE_ANNOTATION,
  ZSTD_MEDIA_TYPE,
  MANIFEST_CHECKSUM_ANNOTATION,
  MANIFEST_POSITION_ANNOTATION,
  TARSPLIT_POSITION_ANNOTATION,
};
export { PREFETCH_LANDMARK, NO_PREFETCH_LANDMARK } from './order.js';

export interface BuildOptions {
  format: 'estargz' | 'zstd:chunked';
  /** Uncompressed bytes per chunk (default 4 MiB). */
  chunkSize?: number;
  /** Files to move to the front (with parents and hardlink targets), followed by `.prefetch.landmark`. */
  prioritize?: string[];
  /** gzip level for eStargz (default 9, like the Go tools). */
  gzipLevel?: number;
  /** zstd level for zstd:chunked (default 3). */
  zstdLevel?: number;
  /** gzip members compressed in parallel (libuv thread pool; default 4). Output does not depend on it. */
  concurrency?: number;
}

export interface BuildResult {
  /**
   * The layer's TOC key: eStargz = sha256 of the TOC JSON (toc.digest annotation), zstd:chunked =
   * sha256 of the compressed manifest (manifest-checksum annotation).
   */
  tocDigest: string;
  /** sha256 of the uncompressed TOC JSON (equals tocDigest for eStargz). */
  tocJsonDigest: string;
  /** Compressed offset where the TOC starts (eStargz member / zstd manifest bytes). */
  tocOffset: number;
  /** sha256 of the decompressed blob (what image configs list in rootfs.diff_ids). */
  diffID: string;
  uncompressedSize: number;
  /** Blob size in bytes. */
  size: number;
  blobDigest: string;
  mediaType: string;
  /** Layer descriptor annotations. */
  annotations: Record<string, string>;
}

export const DEFAULT_CHUNK_SIZE = 4 << 20;

function checkOptions(
  opts: BuildOptions,
): Required<Omit<BuildOptions, 'prioritize'>> & { prioritize: string[] } {
  const chunkSize = opts.chunkSize ?? DEFAULT_CHUNK_SIZE;
  const gzipLevel = opts.gzipLevel ?? 9;
  const zstdLevel = opts.zstdLevel ?? 3;
  const concurrency = opts.concurrency ?? 4;
  if (opts.format !== 'estargz' && opts.format !== 'zstd:chunked') {
    throw new StoreError('E_INVALID_ARGUMENT', `unknown layer format ${String(opts.format)}`);
  }
  if (!Number.isSafeInteger(chunkSize) || chunkSize < 1 || chunkSize > 1 << 30) {
    throw new StoreError('E_INVALID_ARGUMENT', `invalid chunkSize ${chunkSize}`);
  }
  if (!Number.isInteger(gzipLevel) || gzipLevel < 0 || gzipLevel > 9) {
    throw new StoreError('E_INVALID_ARGUMENT', `invalid gzipLevel ${gzipLevel}`);
  }
  if (!Number.isInteger(zstdLevel) || zstdLevel < -7 || zstdLevel > 22) {
    throw new StoreError('E_INVALID_ARGUMENT', `invalid zstdLevel ${zstdLevel}`);
  }
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new StoreError('E_INVALID_ARGUMENT', `invalid concurrency ${concurrency}`);
  }
  return {
    format: opts.format,
    chunkSize,
    gzipLevel,
    zstdLevel,
    concurrency,
    prioritize: opts.prioritize ?? [],
  };
}

async function build(
  source: TarSource,
  out: NodeJS.WritableStream,
  opts: BuildOptions,
): Promise<BuildResult> {
  const sink = new BlobSink(out);
  try {
    return await buildInto(source, sink, opts);
  } catch (err) {
    destroyOutput(out);
    throw err;
  }
}

/**
 * Never leave a half-written output looking healthy. Destroyed without an error argument: an
 * 'error' event on a stream the caller does not listen to would crash the process; the caller
 * gets the error from our rejected promise instead.
 */
function destroyOutput(out: NodeJS.WritableStream): void {
  (out as NodeJS.WritableStream & { destroy?: () => void }).destroy?.();
}

async function buildInto(source: TarSource, sink: BlobSink, opts: BuildOptions): Promise<BuildResult> {
  const o = checkOptions(opts);
  if (o.format === 'estargz') {
    const items = orderEntries(source.entries, { prioritize: o.prioritize, landmark: 'always' });
    const r = await writeEstargz(items, source.payload, sink, o);
    await sink.end();
    return {
      tocDigest: r.tocDigest,
      tocJsonDigest: r.tocDigest,
      tocOffset: r.tocOffset,
      diffID: r.diffID,
      uncompressedSize: r.uncompressedSize,
      size: sink.offset,
      blobDigest: sink.digest(),
      mediaType: ESTARGZ_MEDIA_TYPE,
      annotations: {
        [TOC_DIGEST_ANNOTATION]: r.tocDigest,
        [UNCOMPRESSED_SIZE_ANNOTATION]: String(r.uncompressedSize),
      },
    };
  }
  // zstd:chunked keeps the tar order (plus prioritised files first and `.prefetch.landmark` when asked).
  const items = orderEntries(source.entries, { prioritize: o.prioritize, landmark: 'prioritized' });
  const r = await writeZstdChunked(items, source.payload, sink, o);
  await sink.end();
  return {
    tocDigest: r.manifestChecksum,
    tocJsonDigest: r.tocJsonDigest,
    tocOffset: r.manifestOffset,
    diffID: r.diffID,
    uncompressedSize: r.uncompressedSize,
    size: sink.offset,
    blobDigest: sink.digest(),
    mediaType: ZSTD_MEDIA_TYPE,
    annotations: {
      [MANIFEST_CHECKSUM_ANNOTATION]: r.manifestChecksum,
      [MANIFEST_POSITION_ANNOTATION]: `${r.manifestOffset}:${r.manifestLength}:${r.manifestUncompressed}:1`,
      [TARSPLIT_POSITION_ANNOTATION]: `${r.tarSplitOffset}:${r.tarSplitLength}:${r.tarSplitUncompressed}`,
    },
  };
}

/**
 * Build from a tar stream into `output` (which is ended when done). The input is spooled to a
 * temporary file, so arbitrarily large tars are fine; memory use is about a few chunks.
 */
export async function buildLayer(
  input: TarInput,
  output: NodeJS.WritableStream,
  opts: BuildOptions,
): Promise<BuildResult> {
  let source: TarSource;
  try {
    checkOptions(opts);
    source = await openTarStream(input);
  } catch (err) {
    destroyOutput(output);
    throw asStoreError(err, 'E_IO');
  }
  try {
    return await build(source, output, opts);
  } finally {
    await source.close();
  }
}

/** Build from a tar file (plain tars are read in place) into `outPath`. */
export async function buildLayerToFile(
  inTarPath: string,
  outPath: string,
  opts: BuildOptions,
): Promise<BuildResult> {
  checkOptions(opts);
  const source = await openTarFile(inTarPath);
  try {
    return await build(source, createWriteStream(outPath), opts);
  } catch (err) {
    await rm(outPath, { force: true });
    throw err;
  } finally {
    await source.close();
  }
}

/** Build in memory. */
export async function buildLayerBuffer(
  tar: Buffer,
  opts: BuildOptions,
): Promise<BuildResult & { blob: Buffer }> {
  checkOptions(opts);
  const source = await openTarBuffer(tar);
  const parts: Buffer[] = [];
  const out = new Writable({
    write(chunk: Buffer, _enc, cb) {
      parts.push(chunk);
      cb();
    },
  });
  try {
    const result = await build(source, out, opts);
    return { ...result, blob: Buffer.concat(parts) };
  } finally {
    await source.close();
  }
}
