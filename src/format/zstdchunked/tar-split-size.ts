import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { StoreError } from '../../util/errors.js';
import type { RangeReader } from '../../util/range-reader.js';
import { sha256Async } from '../codec.js';
import type { LayerIndex } from '../model.js';
import { CURRENT_FOOTER_SIZE, parseZstdFooter } from './footer.js';
import { decompressManifest } from './manifest.js';

/** Largest tar-split we decode (compressed and uncompressed). */
const MAX_TAR_SPLIT_BYTES = 128 * 1024 * 1024;
/** JSON lines parsed between two turns of the event loop. */
const LINES_PER_TURN = 2000;

/**
 * The exact uncompressed tar size of a current-flavour zstd:chunked layer, from its tar-split
 * (github.com/vbatts/tar-split JSON lines, one per tar entry): the raw segments (headers, padding,
 * end-of-archive blocks) carry their bytes base64-encoded, file entries their content size, and
 * together they are the whole original tar stream.
 *
 * The tar-split frame is checked against the `tarSplitDigest` of the verified TOC (a LayerIndex
 * exists only once its TOC matched the image's digest, so nothing is read or hashed twice).
 * Undefined when the layer has no tar-split or its TOC names no digest for it; a StoreError when
 * something does not match.
 */
export async function tarSizeFromTarSplit(
  blob: RangeReader,
  index: Pick<LayerIndex, 'format' | 'blobSize' | 'tarSplitDigest'>,
  signal?: AbortSignal,
): Promise<number | undefined> {
  const expected = index.tarSplitDigest;
  if (index.format !== 'zstd:chunked' || expected === undefined) return undefined;
  if (blob.size !== index.blobSize || blob.size < CURRENT_FOOTER_SIZE) return undefined;
  const footer = parseZstdFooter(
    await blob.read(blob.size - CURRENT_FOOTER_SIZE, CURRENT_FOOTER_SIZE, signal),
    blob.size,
  );
  const ts = footer.tarSplit;
  if (!ts || ts.length === 0) return undefined;
  if (ts.length > MAX_TAR_SPLIT_BYTES || ts.uncompressedLength > MAX_TAR_SPLIT_BYTES) {
    throw new StoreError('E_TOO_LARGE', `tar-split of ${ts.uncompressedLength} bytes exceeds the limit`, {
      size: ts.uncompressedLength,
      limit: MAX_TAR_SPLIT_BYTES,
    });
  }
  const compressed = await blob.read(ts.offset, ts.length, signal);
  const actual = await sha256Async(compressed);
  if (actual !== expected) {
    throw new StoreError('E_DIGEST_MISMATCH', 'tar-split does not match the TOC tarSplitDigest', {
      expected,
      actual,
    });
  }
  const text = await decompressManifest(compressed, ts.uncompressedLength, signal);
  return await sumTarSplit(text, signal);
}

/** Sum of raw segment bytes and file sizes over tar-split JSON lines. */
export async function sumTarSplit(text: Buffer, signal?: AbortSignal): Promise<number> {
  let total = 0;
  let pos = 0;
  let lines = 0;
  while (pos < text.length) {
    let nl = text.indexOf(0x0a, pos);
    if (nl < 0) nl = text.length;
    if (nl > pos) {
      let e: unknown;
      try {
        e = JSON.parse(text.toString('utf8', pos, nl));
      } catch {
        throw new StoreError('E_BAD_TOC', 'tar-split line is not JSON', { at: pos });
      }
      total += entrySize(e, pos);
      if (!Number.isSafeInteger(total)) throw new StoreError('E_BAD_TOC', 'tar-split sizes overflow');
    }
    pos = nl + 1;
    if (++lines % LINES_PER_TURN === 0) {
      await yieldToLoop();
      if (signal?.aborted) throw new StoreError('E_ABORTED', 'aborted while reading the tar-split');
    }
  }
  return total;
}

function entrySize(e: unknown, at: number): number {
  if (typeof e !== 'object' || e === null)
    throw new StoreError('E_BAD_TOC', 'tar-split entry is not an object', { at });
  const r = e as { type?: unknown; size?: unknown; payload?: unknown };
  if (r.type === 1) {
    // file content; Go omits size 0
    const size = r.size ?? 0;
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
      throw new StoreError('E_BAD_TOC', 'tar-split file entry has a bad size', { at });
    }
    return size;
  }
  if (r.type === 2) {
    if (r.payload === null || r.payload === undefined) return 0;
    if (
      typeof r.payload !== 'string' ||
      !/^[A-Za-z0-9+/]*={0,2}$/.test(r.payload) ||
      r.payload.length % 4 !== 0
    ) {
      throw new StoreError('E_BAD_TOC', 'tar-split segment payload is not base64', { at });
    }
    return Buffer.byteLength(r.payload, 'base64');
  }
  throw new StoreError('E_BAD_TOC', `tar-split entry of unknown type ${String(r.type).slice(0, 20)}`, { at });
}
