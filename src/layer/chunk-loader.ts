import type { ChunkCache } from '../cache/chunk-cache.js';
import { isValidDigest } from '../cache/paths.js';
import { decodeChunk } from '../format/codec.js';
import type { Chunk, Compression } from '../format/model.js';
import { asStoreError, StoreError, type ErrorContext } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { coalesce, type Span } from './ranges.js';
import type { BlobSource, ByteRange } from './types.js';

export interface LoaderContext {
  source: BlobSource;
  cache: ChunkCache;
  compression: Compression;
  blobSize: number;
  /** Spans closer than this are fetched as one range. */
  maxGap: number;
  /** Limit for parallel single-range reads when the source has no readRanges. */
  rangeConcurrency: number;
  logger: Logger;
  context: ErrorContext;
  /** Wraps network work (on-demand priority). */
  runFetch<T>(fn: () => Promise<T>): Promise<T>;
  onFetched(bytes: number): void;
  onVerified(chunk: Chunk): void;
}

interface Pending {
  chunk: Chunk;
  resolve: (b: Buffer) => void;
  reject: (e: unknown) => void;
}

interface PendingSpan extends Span {
  entries: Pending[];
}

/**
 * Turns chunk lists into verified bytes: memory cache, then disk cache, then ONE coalesced fetch
 * for everything still missing, decoded and verified per chunk. Concurrent requests for the same
 * digest share one promise (single flight), whichever request started it.
 */
export class ChunkLoader {
  private readonly inflight = new Map<string, Promise<Buffer>>();
  private readonly verifiedZeros = new Set<string>();

  constructor(private readonly ctx: LoaderContext) {}

  /** In-memory bytes for every chunk, or undefined if any needs I/O (the synchronous fast path). */
  tryMemory(chunks: readonly Chunk[]): Buffer[] | undefined {
    const out: Buffer[] = [];
    for (const c of chunks) {
      if (c.zeros) {
        if (!this.verifiedZeros.has(c.digest)) return undefined;
        out.push(Buffer.alloc(c.size));
        continue;
      }
      if (!isValidDigest(c.digest)) return undefined;
      const b = this.ctx.cache.getMemory(c.digest);
      if (b === undefined || b.length !== c.size) return undefined;
      this.ctx.onVerified(c);
      out.push(b);
    }
    return out;
  }

  /** Verified bytes of each chunk, in order. */
  load(chunks: readonly Chunk[]): Promise<Buffer[]> {
    const results: Array<Buffer | Promise<Buffer>> = [];
    const mine = new Map<string, Pending>();
    for (const c of chunks) {
      if (c.zeros) {
        results.push(this.zeros(c));
        continue;
      }
      if (!isValidDigest(c.digest)) {
        results.push(Promise.reject(this.badToc('chunk digest is not sha256:<hex>', c)));
        continue;
      }
      const mem = this.ctx.cache.getMemory(c.digest);
      if (mem !== undefined) {
        this.ctx.onVerified(c);
        results.push(this.checkSize(mem, c));
        continue;
      }
      const shared = this.inflight.get(c.digest);
      if (shared !== undefined) {
        results.push(shared.then((b) => this.checkSize(b, c)));
        continue;
      }
      let resolve!: (b: Buffer) => void;
      let reject!: (e: unknown) => void;
      const p = new Promise<Buffer>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      p.catch(() => undefined);
      const settle = (): void => {
        this.inflight.delete(c.digest);
      };
      p.then(settle, settle);
      this.inflight.set(c.digest, p);
      mine.set(c.digest, { chunk: c, resolve, reject });
      results.push(p.then((b) => this.checkSize(b, c)));
    }
    if (mine.size > 0) void this.resolve([...mine.values()]);
    return Promise.all(results);
  }

  private async zeros(c: Chunk): Promise<Buffer> {
    if (!this.verifiedZeros.has(c.digest)) {
      // The flag is TOC data like any other: check once that the digest really is of zeros.
      await decodeChunk(this.ctx.compression, Buffer.alloc(0), c, this.ctx.context);
      this.verifiedZeros.add(c.digest);
      this.ctx.onVerified(c);
    }
    return Buffer.alloc(c.size);
  }

  private checkSize(b: Buffer, c: Chunk): Buffer {
    if (b.length !== c.size) throw this.badToc(`chunk size ${c.size} does not match its digest's content`, c);
    return b;
  }

  private badToc(message: string, c: Chunk): StoreError {
    return new StoreError('E_BAD_TOC', message, {
      ...this.ctx.context,
      offset: c.fileOffset,
      compressedOffset: c.compressedOffset,
    });
  }

  private async resolve(entries: Pending[]): Promise<void> {
    const missing: Pending[] = [];
    await Promise.all(
      entries.map(async (e) => {
        try {
          const b = await this.ctx.cache.get(e.chunk.digest);
          if (b === undefined) missing.push(e);
          else {
            this.ctx.onVerified(e.chunk);
            e.resolve(b);
          }
        } catch (err) {
          e.reject(err);
        }
      }),
    );
    if (missing.length === 0) return;
    try {
      await this.ctx.runFetch(() => this.fetchAndDecode(missing));
    } catch (err) {
      for (const e of missing) e.reject(err);
    }
  }

  /** One coalesced fetch for all `entries`, then decode + verify + cache each chunk. */
  async fetchAndDecode(entries: Pending[]): Promise<void> {
    const spans = new Map<string, PendingSpan>();
    for (const e of entries) {
      const c = e.chunk;
      if (
        !Number.isSafeInteger(c.compressedOffset) ||
        !Number.isSafeInteger(c.compressedEnd) ||
        c.compressedOffset < 0 ||
        c.compressedEnd <= c.compressedOffset ||
        c.compressedEnd > this.ctx.blobSize
      ) {
        e.reject(this.badToc('chunk compressed span outside the blob', c));
        continue;
      }
      const key = `${c.compressedOffset}:${c.compressedEnd}`;
      let s = spans.get(key);
      if (s === undefined) {
        s = { offset: c.compressedOffset, end: c.compressedEnd, entries: [] };
        spans.set(key, s);
      }
      s.entries.push(e);
    }
    if (spans.size === 0) return;
    const ranges = coalesce([...spans.values()], this.ctx.maxGap);
    const bufs = await this.readRanges(ranges);
    const decodes: Array<Promise<void>> = [];
    ranges.forEach((r, i) => {
      const buf = bufs[i]!;
      for (const s of r.spans) {
        const span = buf.subarray(s.offset - r.offset, s.end - r.offset);
        for (const e of s.entries) decodes.push(this.decodeOne(span, e));
      }
    });
    await Promise.all(decodes);
  }

  private async decodeOne(span: Buffer, e: Pending): Promise<void> {
    try {
      const data = await decodeChunk(this.ctx.compression, span, e.chunk, this.ctx.context);
      this.ctx.onVerified(e.chunk);
      e.resolve(data);
      // Not awaited: the reader gets its bytes now; the cache write finishes on its own.
      this.ctx.cache.put(e.chunk.digest, data).catch((err: unknown) => {
        this.ctx.logger.warn({ err, digest: e.chunk.digest }, 'chunk cache put failed');
      });
    } catch (err) {
      e.reject(asStoreError(err, 'E_DECOMPRESS', this.ctx.context));
    }
  }

  /** Read ranges with one multi-range request when the source can, else bounded parallel reads. */
  async readRanges(ranges: ByteRange[], signal?: AbortSignal): Promise<Buffer[]> {
    const src = this.ctx.source;
    let bufs: Buffer[];
    const plain = ranges.map((r) => ({ offset: r.offset, length: r.length }));
    if (src.readRanges !== undefined && ranges.length > 1) {
      bufs = await src.readRanges(plain, signal);
    } else {
      bufs = new Array<Buffer>(ranges.length);
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < ranges.length) {
          const i = next++;
          bufs[i] = await src.read(plain[i]!.offset, plain[i]!.length, signal);
        }
      };
      await Promise.all(Array.from({ length: Math.min(this.ctx.rangeConcurrency, ranges.length) }, worker));
    }
    let total = 0;
    for (let i = 0; i < ranges.length; i++) {
      if (bufs[i]?.length !== ranges[i]!.length) {
        throw new StoreError('E_TRUNCATED', 'blob source returned a short range', {
          ...this.ctx.context,
          offset: ranges[i]!.offset,
          length: ranges[i]!.length,
        });
      }
      total += ranges[i]!.length;
    }
    this.ctx.onFetched(total);
    return bufs;
  }
}
