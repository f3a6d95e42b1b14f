/**
 * Open a lazy layer blob: detect the format from its footer, fetch the TOC, read it into the
 * normalised tree model (toc-reader.ts) and verify it. Reads the footer, then the TOC (or, with
 * a TOC offset hint, everything from the hint to the end in a single read).
 */
import { asStoreError, StoreError } from '../util/errors.js';
import type { RangeReader } from '../util/range-reader.js';
import { EXTERNAL_TOC_FOOTER_SIZE, findEStargzFooter } from './estargz/footer.js';
import type { LayerIndex } from './model.js';
import type { ParseTurns } from './toc.js';
import { readToc, type TocBytes } from './toc-reader.js';
import type { UnverifiedToc } from './unverified-toc.js';
import {
  detectZstdFooter,
  isSkippableHeader,
  parseZstdFooter,
  SKIPPABLE_HEADER_SIZE,
} from './zstdchunked/footer.js';

export interface OpenLayerOptions {
  /**
   * TOC digest the caller trusts (ALS key): may be tocDigest or tocJsonDigest. Without it the
   * index is returned unverified: only for tools inspecting a blob the user named.
   */
  expectedTocDigest?: string;
  /** Largest TOC accepted, compressed and uncompressed (default 64 MiB). */
  maxTocBytes?: number;
  /** Most TOC entries accepted, chunk entries included (default 1 000 000). */
  maxEntries?: number;
  /** Where the TOC probably starts (e.g. from `manifest-position`): read [hint, end) at once. */
  tocOffsetHint?: number;
  /**
   * Without a hint, the first read takes this many bytes of the blob's end (footer + most TOCs in
   * one round trip; a larger TOC costs one more read of only its missing start). Default 256 KiB.
   */
  tailGuessBytes?: number;
  signal?: AbortSignal;
  /** Whose turn it is to parse the TOC (see ParseTurns). */
  turns?: ParseTurns;
}

export const DEFAULT_MAX_TOC_BYTES = 64 * 1024 * 1024;
/**
 * 500k entries (a big distro image) open in well under the budget; past 1M the tree alone
 * needs hundreds of MB, and such a layer is better pulled normally.
 */
export const DEFAULT_MAX_ENTRIES = 1_000_000;
/** Enough for every footer kind (72 bytes for current zstd:chunked). */
const TAIL_BYTES = 72;
/** Default first read without a hint: at 100 Mbit/s about one 20 ms transfer, less than a round trip. */
export const TAIL_GUESS_BYTES = 256 * 1024;
/** Extra room for a hinted read: zstd:chunked also stores tar-split between manifest and footer. */
const HINT_SLACK = 16 * 1024 * 1024;

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
    if (offset + length <= this.start) return await readBlob(this.reader, offset, length, this.signal);
    // only the part before the tail is fetched
    const head = await readBlob(this.reader, offset, this.start - offset, this.signal);
    return Buffer.concat([head, this.tail.subarray(0, offset + length - this.start)]);
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

/**
 * Where the first read of a layer's metadata starts (it runs to the blob's end): the footer, or
 * footer + TOC when a plausible hint is given. The hint is backed off by one skippable-frame
 * header so zstd:chunked framing is covered too. Exported so a caller can fetch exactly these
 * bytes ahead of the open (the store does while the image config is still being fetched).
 */
export function firstReadStart(
  blobSize: number,
  opts: Pick<OpenLayerOptions, 'tailGuessBytes' | 'tocOffsetHint' | 'maxTocBytes'> = {},
): number {
  const maxTocBytes = opts.maxTocBytes ?? DEFAULT_MAX_TOC_BYTES;
  const guess = Math.max(TAIL_BYTES, Math.floor(opts.tailGuessBytes ?? TAIL_GUESS_BYTES));
  let start = blobSize - Math.min(guess, blobSize);
  const hint = opts.tocOffsetHint;
  const footerStart = blobSize - Math.min(TAIL_BYTES, blobSize);
  if (hint !== undefined && Number.isSafeInteger(hint) && hint >= 0 && hint < footerStart) {
    const from = Math.max(0, hint - SKIPPABLE_HEADER_SIZE);
    if (blobSize - from <= maxTocBytes + HINT_SLACK) start = from;
  }
  return start;
}

/** Footer + TOC -> verified index (with expectedTocDigest), the one TOC digest check. */
export async function openLayer(reader: RangeReader, opts: OpenLayerOptions = {}): Promise<LayerIndex> {
  const toc = await readLayerToc(reader, opts);
  return opts.expectedTocDigest !== undefined ? toc.verify(opts.expectedTocDigest) : toc.trustUnverified();
}

/** Footer + TOC -> an index that is not usable until verified. */
export async function readLayerToc(reader: RangeReader, opts: OpenLayerOptions = {}): Promise<UnverifiedToc> {
  const maxTocBytes = opts.maxTocBytes ?? DEFAULT_MAX_TOC_BYTES;
  const maxEntries = opts.maxEntries ?? DEFAULT_MAX_ENTRIES;
  const signal = opts.signal;
  const blobSize = reader.size;
  try {
    signal?.throwIfAborted();
    if (!Number.isSafeInteger(blobSize) || blobSize < EXTERNAL_TOC_FOOTER_SIZE) {
      throw new StoreError('E_BAD_FOOTER', `blob of ${blobSize} bytes is too small to be a lazy layer`);
    }
    const start = firstReadStart(blobSize, opts);
    const tail = await readBlob(reader, start, blobSize - start, signal);
    const cache = new TailCache(reader, start, tail, signal);
    const footerArea = tail.subarray(Math.max(0, tail.length - TAIL_BYTES));

    const toc = detectZstdFooter(footerArea)
      ? await readZstdToc(cache, footerArea, blobSize, maxTocBytes)
      : await readEStargzToc(cache, footerArea, blobSize, maxTocBytes);
    const readOpts: Parameters<typeof readToc>[1] = { maxEntries, maxTocBytes };
    if (opts.expectedTocDigest !== undefined) readOpts.expectedTocDigest = opts.expectedTocDigest;
    if (signal !== undefined) readOpts.signal = signal;
    if (opts.turns !== undefined) readOpts.turns = opts.turns;
    return await readToc(toc, readOpts);
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
): Promise<TocBytes> {
  const { tocOffset, footerSize } = await findEStargzFooter(footerArea).catch((err: unknown) => {
    if (!(err instanceof StoreError) || err.code !== 'E_BAD_FOOTER') throw err;
    // Neither footer: name both formats tried. A truncated zstd:chunked blob (its footer cut off)
    // lands here too, and an eStargz-only message would send the operator the wrong way.
    throw new StoreError(
      'E_BAD_FOOTER',
      `not eStargz (${err.message}) and not zstd:chunked (no zstd:chunked footer magic at the end of the blob)`,
      err.context,
      { cause: err },
    );
  });
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
  return { format: 'estargz', blobSize, tocOffset, dataEnd: tocOffset, member };
}

async function readZstdToc(
  cache: TailCache,
  footerArea: Buffer,
  blobSize: number,
  maxTocBytes: number,
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
  // data ends where the first metadata frame (manifest or tar-split) begins
  let dataEnd = frameStart;
  if (footer.tarSplit !== undefined && footer.tarSplit.length > 0) {
    dataEnd = Math.min(dataEnd, footer.tarSplit.offset - SKIPPABLE_HEADER_SIZE);
  }
  return {
    format: footer.flavour === 'current' ? 'zstd:chunked' : 'zstd:chunked-legacy',
    blobSize,
    tocOffset: manifestOffset,
    dataEnd,
    manifest: { compressed, uncompressedLength: manifestUncompressedLength },
  };
}
