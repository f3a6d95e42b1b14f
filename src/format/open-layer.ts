/**
 * Open a lazy layer blob: detect the format from its footer, fetch and verify the TOC, and
 * return the normalised tree model. Reads the footer, then the TOC (or, with a TOC offset
 * hint, everything from the hint to the end in a single read).
 */
import { asStoreError, DigestMismatchError, StoreError } from '../util/errors.js';
import type { RangeReader } from '../util/range-reader.js';
import { EXTERNAL_TOC_FOOTER_SIZE, findEStargzFooter } from './estargz/footer.js';
import { extractTocJson, locateTocJson, type TocJsonLocation } from './estargz/toc-member.js';
import type { LayerFormat, LayerIndex } from './model.js';
import { sha256Async } from './codec.js';
import { parsePreparedToc } from './toc.js';
import { OFF_THREAD_MEMBER_THRESHOLD, prepareEStargzTocOffThread, prepareToc } from './toc-worker.js';
import { buildTree } from './toc-tree.js';
import {
  detectZstdFooter,
  isSkippableHeader,
  parseZstdFooter,
  SKIPPABLE_HEADER_SIZE,
} from './zstdchunked/footer.js';
import { decompressManifest } from './zstdchunked/manifest.js';

export interface OpenLayerOptions {
  /** TOC digest the caller trusts (ALS key): may be tocDigest or tocJsonDigest. */
  expectedTocDigest?: string;
  /** Largest TOC accepted, compressed and uncompressed (default 64 MiB). */
  maxTocBytes?: number;
  /** Most TOC entries accepted, chunk entries included (default 4 000 000). */
  maxEntries?: number;
  /** Where the TOC probably starts (e.g. from `manifest-position`): read [hint, end) at once. */
  tocOffsetHint?: number;
  signal?: AbortSignal;
}

export const DEFAULT_MAX_TOC_BYTES = 64 * 1024 * 1024;
export const DEFAULT_MAX_ENTRIES = 4_000_000;
/** Enough for every footer kind (72 bytes for current zstd:chunked). */
const TAIL_BYTES = 72;
/** Extra room for a hinted read: zstd:chunked also stores tar-split between manifest and footer. */
const HINT_SLACK = 16 * 1024 * 1024;

interface TocBytes {
  format: LayerFormat;
  tocOffset: number;
  dataEnd: number;
  /** The TOC JSON, or (big eStargz TOCs) the member with the JSON's location, for the worker. */
  json: Buffer | { member: Buffer; location: TocJsonLocation };
  /** zstd:chunked: the compressed manifest bytes. */
  compressed?: Buffer;
}

/** Reads through a cached tail buffer so the footer/TOC bytes already fetched are reused. */
class TailCache {
  constructor(
    private readonly reader: RangeReader,
    private readonly start: number,
    private readonly tail: Buffer,
    private readonly signal: AbortSignal | undefined,
  ) {}

  async read(offset: number, length: number): Promise<Buffer> {
    if (offset < 0 || length < 0 || offset + length > this.reader.size) {
      throw new StoreError('E_TRUNCATED', `range [${offset}, ${offset + length}) outside the blob`, {
        offset,
      });
    }
    if (offset >= this.start) return this.tail.subarray(offset - this.start, offset - this.start + length);
    return await readBlob(this.reader, offset, length, this.signal);
  }
}

/** Reader errors become StoreErrors (a reader should throw them already; be sure). */
async function readBlob(
  reader: RangeReader,
  offset: number,
  length: number,
  signal?: AbortSignal,
): Promise<Buffer> {
  signal?.throwIfAborted();
  try {
    return await reader.read(offset, length, signal);
  } catch (err) {
    if (signal?.aborted) throw new StoreError('E_ABORTED', 'read aborted', { offset }, { cause: err });
    throw asStoreError(err, 'E_IO', { offset, length });
  }
}

export async function openLayer(reader: RangeReader, opts: OpenLayerOptions = {}): Promise<LayerIndex> {
  const maxTocBytes = opts.maxTocBytes ?? DEFAULT_MAX_TOC_BYTES;
  const maxEntries = opts.maxEntries ?? DEFAULT_MAX_ENTRIES;
  const signal = opts.signal;
  const blobSize = reader.size;
  try {
    signal?.throwIfAborted();
    if (!Number.isSafeInteger(blobSize) || blobSize < EXTERNAL_TOC_FOOTER_SIZE) {
      throw new StoreError('E_BAD_FOOTER', `blob of ${blobSize} bytes is too small to be a lazy layer`);
    }
    // One read for the footer, or footer + TOC when a plausible hint is given. The hint is
    // backed off by one skippable-frame header so zstd:chunked framing is covered too.
    let start = blobSize - Math.min(TAIL_BYTES, blobSize);
    const hint = opts.tocOffsetHint;
    if (hint !== undefined && Number.isSafeInteger(hint) && hint >= 0 && hint < start) {
      const from = Math.max(0, hint - SKIPPABLE_HEADER_SIZE);
      if (blobSize - from <= maxTocBytes + HINT_SLACK) start = from;
    }
    const tail = await readBlob(reader, start, blobSize - start, signal);
    const cache = new TailCache(reader, start, tail, signal);
    const footerArea = tail.subarray(Math.max(0, tail.length - TAIL_BYTES));

    const toc = detectZstdFooter(footerArea)
      ? await readZstdToc(cache, footerArea, blobSize, maxTocBytes, signal)
      : await readEStargzToc(cache, footerArea, blobSize, maxTocBytes, signal);

    // big TOCs: inflating, hashing and JSON.parse happen on a worker thread (toc-worker.ts)
    const prepareOpts = { maxEntries, ...(signal ? { signal } : {}) };
    const prepared = Buffer.isBuffer(toc.json)
      ? await prepareToc(toc.json, prepareOpts)
      : await prepareEStargzTocOffThread(toc.json.member, toc.json.location, prepareOpts);
    const tocJsonDigest = prepared.jsonDigest;
    const manifestChecksum = toc.compressed !== undefined ? await sha256Async(toc.compressed) : undefined;
    const tocDigest = manifestChecksum ?? tocJsonDigest;
    const expected = opts.expectedTocDigest;
    if (expected !== undefined && expected !== tocDigest && expected !== tocJsonDigest) {
      throw new DigestMismatchError('toc', expected, tocDigest, { tocJsonDigest });
    }
    signal?.throwIfAborted();

    const parsed = await parsePreparedToc(prepared, { maxEntries });
    signal?.throwIfAborted();
    const tree = await buildTree(parsed.entries, { dataEnd: toc.dataEnd });
    const index: LayerIndex = {
      format: toc.format,
      compression: toc.format === 'estargz' ? 'gzip' : 'zstd',
      blobSize,
      tocOffset: toc.tocOffset,
      tocDigest,
      tocJsonDigest,
      root: tree.root,
      nodes: tree.nodes,
      prefetch: tree.prefetch,
      dataEnd: toc.dataEnd,
    };
    if (manifestChecksum !== undefined) index.manifestChecksum = manifestChecksum;
    return index;
  } catch (err) {
    if (err instanceof StoreError) throw err;
    if (signal?.aborted) throw new StoreError('E_ABORTED', 'openLayer aborted', {}, { cause: err });
    // anything else escaping the parsers means the layer's metadata is unusable: typed, with cause
    throw asStoreError(err, 'E_BAD_TOC', { blobSize });
  }
}

async function readEStargzToc(
  cache: TailCache,
  footerArea: Buffer,
  blobSize: number,
  maxTocBytes: number,
  signal: AbortSignal | undefined,
): Promise<TocBytes> {
  const { tocOffset, footerSize } = await findEStargzFooter(footerArea);
  const footerStart = blobSize - footerSize;
  if (tocOffset >= footerStart) {
    throw new StoreError('E_BAD_FOOTER', `TOC offset ${tocOffset} is not inside the blob`, {
      offset: tocOffset,
    });
  }
  const tocSize = footerStart - tocOffset;
  // a gzip member is never much larger than its content
  if (tocSize > maxTocBytes + 64 * 1024) {
    throw new StoreError('E_TOC_TOO_LARGE', `TOC member is ${tocSize} bytes (limit ${maxTocBytes})`, {
      limit: maxTocBytes,
    });
  }
  const member = await cache.read(tocOffset, tocSize);
  const opts = { maxTocBytes, ...(signal ? { signal } : {}) };
  // A big member is only located here (its first tar headers); the worker does the rest.
  const json =
    member.length < OFF_THREAD_MEMBER_THRESHOLD
      ? await extractTocJson(member, opts)
      : { member, location: await locateTocJson(member, opts) };
  return { format: 'estargz', tocOffset, dataEnd: tocOffset, json };
}

async function readZstdToc(
  cache: TailCache,
  footerArea: Buffer,
  blobSize: number,
  maxTocBytes: number,
  signal: AbortSignal | undefined,
): Promise<TocBytes> {
  const footer = parseZstdFooter(footerArea, blobSize);
  const { manifestOffset, manifestLength, manifestUncompressedLength } = footer;
  if (manifestLength > maxTocBytes || manifestUncompressedLength > maxTocBytes) {
    throw new StoreError(
      'E_TOC_TOO_LARGE',
      `manifest is ${manifestUncompressedLength} bytes (limit ${maxTocBytes})`,
      {
        limit: maxTocBytes,
      },
    );
  }
  const frameStart = manifestOffset - SKIPPABLE_HEADER_SIZE;
  const framed = await cache.read(frameStart, SKIPPABLE_HEADER_SIZE + manifestLength);
  if (!isSkippableHeader(framed, manifestLength)) {
    throw new StoreError('E_BAD_TOC', 'zstd:chunked manifest is not inside a skippable frame of its length', {
      offset: frameStart,
    });
  }
  const compressed = framed.subarray(SKIPPABLE_HEADER_SIZE);
  const json = await decompressManifest(compressed, manifestUncompressedLength, signal);
  // data ends where the first metadata frame (manifest or tar-split) begins
  let dataEnd = frameStart;
  if (footer.tarSplit !== undefined && footer.tarSplit.length > 0) {
    dataEnd = Math.min(dataEnd, footer.tarSplit.offset - SKIPPABLE_HEADER_SIZE);
  }
  return {
    format: footer.flavour === 'current' ? 'zstd:chunked' : 'zstd:chunked-legacy',
    tocOffset: manifestOffset,
    dataEnd,
    json,
    compressed,
  };
}
