import { createHash } from 'node:crypto';
import type { RangeReader } from '../../util/range-reader.js';
import { StoreError } from '../../util/errors.js';
import { TYPE_REG, encodeHeader, padding, tocType, type TarHeader, type TocType } from './tar-header.js';
import type { SourceItem } from './order.js';
import { Crc64Iso, type TarSplitBuilder } from './tar-split.js';

/** One chunk of a regular file as written; compressed positions are filled in when written. */
export interface ChunkDraft {
  chunkOffset: number;
  size: number;
  digest: string;
  /** All-zero content (zstd:chunked `chunkType: "zeros"`). */
  zeros: boolean;
  /** Compressed offset of the member/frame that starts with this chunk. */
  offset: number;
  /** Compressed end of that member/frame. */
  end: number;
}

/** One TOC-relevant entry in output order. */
export interface EntryDraft {
  header: TarHeader;
  type: TocType;
  /** sha256 of the whole payload (regular files). */
  digest?: string;
  chunks: ChunkDraft[];
}

/** A unit of uncompressed bytes that becomes one gzip member / zstd frame. */
export interface Unit {
  parts: Buffer[];
  length: number;
  /** Set when the unit starts with this chunk's payload. */
  chunk?: ChunkDraft;
}

export interface LayoutOptions {
  /**
   * 'estargz': a member = [chunk payload][padding + following headers] (spec §1.1), no tar EOF.
   * 'zstd': payload chunks are frames of their own; headers/padding live in frames between them;
   *   the last frame ends with the tar EOF blocks (containers/storage layout).
   */
  style: 'estargz' | 'zstd';
  chunkSize: number;
  tarSplit?: TarSplitBuilder;
}

const EMPTY_SHA256 = 'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

function sha256(b: Buffer): string {
  return 'sha256:' + createHash('sha256').update(b).digest('hex');
}

/**
 * Walk the ordered entries, yielding compression units in output order and recording an
 * EntryDraft per entry into `drafts` (chunk digests now, compressed offsets later).
 */
export async function* layoutUnits(
  items: SourceItem[],
  payload: RangeReader,
  opts: LayoutOptions,
  drafts: EntryDraft[],
): AsyncGenerator<Unit> {
  if (!Number.isSafeInteger(opts.chunkSize) || opts.chunkSize <= 0) {
    throw new StoreError('E_INVALID_ARGUMENT', `invalid chunk size ${opts.chunkSize}`);
  }
  const zeroBlock = Buffer.alloc(Math.min(opts.chunkSize, 16 << 20));
  const isZero = (b: Buffer): boolean => {
    for (let off = 0; off < b.length; off += zeroBlock.length) {
      const part = b.subarray(off, off + zeroBlock.length);
      if (!part.equals(zeroBlock.subarray(0, part.length))) return false;
    }
    return true;
  };
  let cur: Buffer[] = [];
  let curLen = 0;
  let curChunk: ChunkDraft | undefined;
  const push = (b: Buffer): void => {
    if (b.length === 0) return;
    cur.push(b);
    curLen += b.length;
  };
  const take = (): Unit | undefined => {
    if (curLen === 0) return undefined;
    const unit: Unit = { parts: cur, length: curLen };
    if (curChunk) unit.chunk = curChunk;
    cur = [];
    curLen = 0;
    curChunk = undefined;
    return unit;
  };
  const ts = opts.tarSplit;

  for (const item of items) {
    const h = item.header;
    const type = tocType(h.typeflag);
    if (type === undefined) {
      throw new StoreError('E_UNSUPPORTED_FORMAT', `unsupported tar entry type ${h.typeflag}`, {
        path: h.name,
      });
    }
    const size = h.typeflag === TYPE_REG ? h.size : 0;
    const hdr = encodeHeader(size === h.size ? h : { ...h, size });
    const draft: EntryDraft = { header: h, type, chunks: [] };
    drafts.push(draft);
    push(hdr);
    ts?.raw(hdr);
    if (type !== 'reg') {
      ts?.file(h.name, 0, null);
      continue;
    }
    if (size === 0) {
      draft.digest = EMPTY_SHA256;
      ts?.file(h.name, 0, null);
      continue;
    }
    const whole = createHash('sha256');
    const crc = ts ? new Crc64Iso() : undefined;
    for (let off = 0; off < size; off += opts.chunkSize) {
      const n = Math.min(opts.chunkSize, size - off);
      const piece = item.inline
        ? item.inline.subarray(off, off + n)
        : await payload.read(item.dataOffset + off, n);
      whole.update(piece);
      crc?.update(piece);
      const chunk: ChunkDraft = {
        chunkOffset: off,
        size: n,
        digest: sha256(piece),
        zeros: opts.style === 'zstd' && isZero(piece),
        offset: -1,
        end: -1,
      };
      draft.chunks.push(chunk);
      const before = take();
      if (before) yield before;
      push(piece);
      curChunk = chunk;
      if (opts.style === 'zstd') yield take()!;
    }
    draft.digest = 'sha256:' + whole.digest('hex');
    const pad = Buffer.alloc(padding(size));
    push(pad);
    ts?.file(h.name, size, crc!.digest());
    ts?.raw(pad);
  }
  if (opts.style === 'zstd') {
    const eof = Buffer.alloc(1024);
    push(eof);
    ts?.raw(eof);
  }
  const last = take();
  if (last) yield last;
}
