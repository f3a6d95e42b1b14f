import { StoreError, type ErrorContext } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { checkRange, type RangeReader } from '../util/range-reader.js';
import type { BlockCache } from './block-cache.js';
import { blockRange, blockRuns, blockSpan, coalesce, type ByteRange } from './byte-ranges.js';
import type { Endpoint } from './hosts.js';
import { consumeRangeResponse, type RangeOutcome, type Span } from './range-fetch.js';
import { abortedError, raceSignal } from './signals.js';
import type { Transport } from './transport.js';

export type { ByteRange } from './byte-ranges.js';

export interface BlobReaderStats {
  /** HTTP range requests answered (retried attempts that failed by status are not counted). */
  requests: number;
  /** Response body bytes received. */
  bytes: number;
  /** Blocks served from the in-memory block cache. */
  cacheHits: number;
}

/**
 * Random access to one registry blob. `read` and `readRanges` return exactly the requested bytes
 * or throw a StoreError (E_DEADLINE, E_ABORTED, E_REGISTRY_*, E_TRUNCATED); never short or
 * misplaced data. Returned buffers may be views of shared memory (the block cache, a response
 * body): treat them as read-only.
 */
export interface BlobReader extends RangeReader {
  readonly digest: string;
  /** Fetch several ranges at once (coalesced, one multi-range request where the host allows it). */
  readRanges(ranges: ReadonlyArray<ByteRange>, signal?: AbortSignal): Promise<Buffer[]>;
  stats(): BlobReaderStats;
}

/** What a client learnt about a host's Range support (shared by all blobs on that origin). */
export interface HostRangeState {
  multiRange: boolean;
  /** The host answered a single range with the whole blob at least once. */
  ignoresRange: boolean;
}

export interface BlobReaderDeps {
  transport: Transport;
  ep: Endpoint;
  ref: string;
  digest: string;
  size: number;
  blockSize: number;
  cache: BlockCache;
  hostState: HostRangeState;
  forceSingleRange: boolean;
  /** Budget for one fetch including retries (Go: `fetching_timeout_sec` 300). */
  fetchTimeoutMs: number;
  maxRangesPerRequest: number;
  /** Parallel requests when ranges must be fetched one per request. */
  concurrency: number;
  /** In single-range mode, gaps up to this many bytes are fetched rather than split into two requests. */
  singleRangeGap: number;
  /** Largest read-ahead window for sequential single-range reads (0 = off). */
  readAheadBytes: number;
  logger?: Logger;
}

interface Flight {
  refs: number;
  /** A read-ahead: holds a reference of its own, and its failure is nobody's error. */
  speculative: boolean;
  ctl: AbortController;
  blocks: number[];
  promise: Promise<Map<number, Buffer>>;
}

/** One read-ahead window [start, end) and its fetch. */
interface AheadPiece {
  start: number;
  end: number;
  flight: Flight;
  got?: Map<number, Buffer>;
  failed?: boolean;
}

/** Read-ahead windows kept in flight at once for a sequential reader. */
const READ_AHEAD_DEPTH = 2;

export class RegistryBlobReader implements BlobReader {
  readonly digest: string;
  readonly size: number;
  private readonly inflight = new Map<number, Flight>();
  private readonly counters: BlobReaderStats = { requests: 0, bytes: 0, cacheHits: 0 };
  private readonly logger: Logger;
  private readonly ctx: ErrorContext;
  /** Read-ahead state: end of the last single-range read, run length of sequential reads. */
  private lastEnd = -1;
  private seqRun = 0;
  /** Read-ahead windows, oldest first (together at most readAheadBytes). */
  private pieces: AheadPiece[] = [];

  constructor(private readonly d: BlobReaderDeps) {
    this.digest = d.digest;
    this.size = d.size;
    this.logger = d.logger ?? silentLogger;
    this.ctx = { digest: d.digest, host: d.ep.host, repository: d.ep.repository };
  }

  stats(): BlobReaderStats {
    return { ...this.counters };
  }

  get endpoint(): Endpoint {
    return this.d.ep;
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    checkRange(this.size, offset, length);
    if (length === 0) return Buffer.alloc(0);
    const [buf] = await this.readRanges([{ offset, length }], signal);
    return buf!;
  }

  async readRanges(ranges: ReadonlyArray<ByteRange>, signal?: AbortSignal): Promise<Buffer[]> {
    for (const r of ranges) checkRange(this.size, r.offset, r.length);
    if (signal?.aborted) throw abortedError(signal, this.ctx);
    const bs = this.d.blockSize;
    const sources = new Map<number, Buffer>();
    const joined = new Set<Flight>();
    const missing: number[] = [];
    const needed = new Set<number>();
    for (const r of coalesce(ranges)) {
      const { first, last } = blockSpan(r.offset, r.length, bs);
      for (let b = first; b <= last; b++) needed.add(b);
      // a read-ahead window holding the whole range: its blocks, as one span
      const piece = this.pieces.find((p) => !p.failed && p.start <= r.offset && r.offset + r.length <= p.end);
      if (piece) {
        if (piece.got) {
          for (let b = first; b <= last; b++) sources.set(b, piece.got.get(b)!);
          this.counters.cacheHits += last - first + 1;
        } else {
          joined.add(piece.flight);
        }
        continue;
      }
      // A range that needs the network anyway is fetched whole, cached blocks included: its bytes
      // then arrive as one span and are returned without a copy (for 1 MiB reads the extra block
      // costs ~5% bytes, the copy and its garbage cost far more CPU). Fully cached ranges (small
      // sequential reads) are served from the cache.
      let needsFetch = false;
      let touchesFlight = false;
      for (let b = first; b <= last; b++) {
        if (this.inflight.has(b)) touchesFlight = true;
        else if (!this.d.cache.has(this.cacheKey(b))) needsFetch = true;
      }
      const fetchWhole = needsFetch && !touchesFlight;
      for (let b = first; b <= last; b++) {
        if (missing[missing.length - 1] === b || sources.has(b)) continue;
        if (!fetchWhole) {
          const hit = this.d.cache.get(this.cacheKey(b));
          if (hit) {
            sources.set(b, hit);
            this.counters.cacheHits++;
            continue;
          }
          const f = this.inflight.get(b);
          if (f) {
            joined.add(f);
            continue;
          }
        }
        missing.push(b);
      }
    }
    if (missing.length > 0) joined.add(this.startFlight(missing));
    if (ranges.length === 1) this.noteSequential(ranges[0]!);
    // join every flight before awaiting any, so none is cancelled for lack of interest meanwhile
    for (const f of joined) f.refs++;
    const pending = new Set(joined);
    try {
      await Promise.all(
        [...joined].map(async (f) => {
          let got: Map<number, Buffer>;
          try {
            got = await raceSignal(f.promise, signal, this.ctx);
          } catch (err) {
            if (!f.speculative || signal?.aborted) throw err;
            // the read-ahead failed: fetch what this read needs itself (errors are then ours)
            got = await this.fetchBlocks(
              f.blocks.filter((b) => needed.has(b)),
              signal ?? new AbortController().signal,
            );
          }
          pending.delete(f);
          for (const b of f.blocks) {
            const data = got.get(b);
            if (data) sources.set(b, data);
          }
        }),
      );
    } finally {
      for (const f of pending) this.leave(f);
      for (const f of joined) if (!pending.has(f)) f.refs--;
    }
    return ranges.map((r) => this.assemble(r, sources));
  }

  /**
   * Read-ahead: from the second back-to-back single-range read on, keep up to READ_AHEAD_DEPTH
   * windows (each twice the last read, together at most readAheadBytes) in flight ahead of
   * the reader, so a sequential reader never waits for a full request round trip. Each window is
   * fetched whole (the block it shares with its neighbour twice) so its read is handed out without
   * a copy. Any other read pattern drops the windows.
   */
  private noteSequential(r: ByteRange): void {
    if (this.d.readAheadBytes <= 0 || r.length === 0) return;
    this.seqRun = r.offset === this.lastEnd ? this.seqRun + 1 : 0;
    this.lastEnd = r.offset + r.length;
    if (this.seqRun === 0) {
      this.pieces = [];
      return;
    }
    this.pieces = this.pieces.filter((p) => !p.failed && p.end > r.offset);
    // windows of twice the read: half the requests (each pays the registry's fixed per-request cost)
    const len = Math.max(
      this.d.blockSize,
      Math.min(2 * r.length, Math.floor(this.d.readAheadBytes / READ_AHEAD_DEPTH)),
    );
    let next = Math.max(this.lastEnd, this.pieces[this.pieces.length - 1]?.end ?? 0);
    while (this.pieces.filter((p) => p.start >= this.lastEnd).length < READ_AHEAD_DEPTH && next < this.size) {
      const end = Math.min(this.size, next + len);
      const { first, last } = blockSpan(next, end - next, this.d.blockSize);
      const blocks: number[] = [];
      let cached = 0;
      for (let b = first; b <= last; b++) {
        blocks.push(b);
        if (this.d.cache.has(this.cacheKey(b))) cached++;
      }
      // small reads inside cached blocks need no help
      if (cached === blocks.length) return;
      const piece: AheadPiece = { start: next, end, flight: this.startFlight(blocks, true) };
      piece.flight.promise.then(
        (got) => {
          piece.got = got;
        },
        () => {
          // a failed read-ahead is forgotten; the real read will meet (and report) the problem
          piece.failed = true;
        },
      );
      this.pieces.push(piece);
      next = end;
    }
  }

  private cacheKey(b: number): string {
    return `${this.digest}:${this.d.blockSize}:${b}`;
  }

  private assemble(r: ByteRange, sources: Map<number, Buffer>): Buffer {
    if (r.length === 0) return Buffer.alloc(0);
    const bs = this.d.blockSize;
    const { first, last } = blockSpan(r.offset, r.length, bs);
    if (first === last) {
      const src = sources.get(first)!;
      const start = r.offset - first * bs;
      return src.subarray(start, start + r.length);
    }
    // blocks that are consecutive slices of one response buffer: hand out a view, no copy
    const head = sources.get(first);
    if (head) {
      let contiguous = true;
      for (let b = first + 1; b <= last && contiguous; b++) {
        const src = sources.get(b);
        contiguous =
          !!src && src.buffer === head.buffer && src.byteOffset === head.byteOffset + (b - first) * bs;
      }
      if (contiguous) {
        const start = head.byteOffset + (r.offset - first * bs);
        return Buffer.from(head.buffer, start, r.length);
      }
    }
    const out = Buffer.allocUnsafe(r.length);
    for (let b = first; b <= last; b++) {
      const src = sources.get(b);
      if (!src) throw new StoreError('E_REGISTRY_PROTOCOL', `block ${b} missing after fetch`, this.ctx);
      const bStart = b * bs;
      const from = Math.max(r.offset, bStart);
      const to = Math.min(r.offset + r.length, bStart + src.length);
      src.copy(out, from - r.offset, from - bStart, to - bStart);
    }
    return out;
  }

  /** A waiter gave up: cancel the fetch once nobody wants it any more. */
  private leave(f: Flight): void {
    f.refs--;
    if (f.refs <= 0) {
      for (const b of f.blocks) if (this.inflight.get(b) === f) this.inflight.delete(b);
      f.ctl.abort(new StoreError('E_ABORTED', 'all readers of this range gave up', this.ctx));
    }
  }

  private startFlight(blocks: number[], speculative = false): Flight {
    const ctl = new AbortController();
    // a read-ahead keeps itself alive: a reader that joins it and gives up must not cancel it
    const f: Flight = {
      refs: speculative ? 1 : 0,
      speculative,
      ctl,
      blocks,
      promise: Promise.resolve(new Map()),
    };
    f.promise = this.fetchBlocks(blocks, ctl.signal).finally(() => {
      for (const b of blocks) if (this.inflight.get(b) === f) this.inflight.delete(b);
    });
    // a flight everyone abandoned still settles; nobody is left to observe it
    f.promise.catch(() => undefined);
    for (const b of blocks) this.inflight.set(b, f);
    return f;
  }

  private async fetchBlocks(blocks: number[], signal: AbortSignal): Promise<Map<number, Buffer>> {
    const runs = blockRuns(blocks, this.d.blockSize, this.size);
    let spans = await this.fetchRuns(runs, signal, false);
    const mapped = this.mapBlocks(blocks, spans);
    const found = mapped.found;
    let uncovered = mapped.uncovered;
    if (uncovered.length > 0) {
      // e.g. a 206 that served only some of a multi-range request: ask again for the rest, one range each
      this.logger.debug({ ...this.ctx, blocks: uncovered.length }, 'refetching ranges the registry left out');
      spans = await this.fetchRuns(blockRuns(uncovered, this.d.blockSize, this.size), signal, true);
      const again = this.mapBlocks(uncovered, spans);
      for (const [b, v] of again.found) found.set(b, v);
      uncovered = again.uncovered;
      if (uncovered.length > 0) {
        throw new StoreError(
          'E_REGISTRY_PROTOCOL',
          `registry did not return ${uncovered.length} requested block(s)`,
          {
            ...this.ctx,
            offset: uncovered[0]! * this.d.blockSize,
          },
        );
      }
    }
    // Keep the edges of every run: the next sequential read starts in the last block (the first
    // one only for short runs, where a backwards neighbour read is as likely).
    for (const r of runs) {
      const first = Math.floor(r.offset / this.d.blockSize);
      const last = Math.floor((r.offset + r.length - 1) / this.d.blockSize);
      for (const b of last - first > 3 ? [last] : first === last ? [first] : [first, last]) {
        const data = found.get(b);
        if (data) this.d.cache.set(this.cacheKey(b), data);
      }
    }
    return found;
  }

  /** Locate each block's bytes in the received spans (a block may straddle two parts). */
  private mapBlocks(blocks: number[], spans: Span[]): { found: Map<number, Buffer>; uncovered: number[] } {
    const sorted = [...spans].sort((a, b) => a.offset - b.offset);
    const found = new Map<number, Buffer>();
    const uncovered: number[] = [];
    for (const b of blocks) {
      const r = blockRange(b, this.d.blockSize, this.size);
      const data = extract(sorted, r.offset, r.length);
      if (data) found.set(b, data);
      else uncovered.push(b);
    }
    return { found, uncovered };
  }

  private async fetchRuns(runs: ByteRange[], signal: AbortSignal, forceSingle: boolean): Promise<Span[]> {
    const multi = !forceSingle && !this.d.forceSingleRange && this.d.hostState.multiRange && runs.length > 1;
    if (!multi) {
      const merged = coalesce(runs, this.d.singleRangeGap);
      const outs = await mapLimit(merged, this.d.concurrency, (r) => this.request([r], signal));
      return outs.flatMap((o) => (o.kind === 'multi-rejected' ? [] : o.spans));
    }
    const groups: ByteRange[][] = [];
    for (let i = 0; i < runs.length; i += this.d.maxRangesPerRequest)
      groups.push(runs.slice(i, i + this.d.maxRangesPerRequest));
    const outs = await mapLimit(groups, this.d.concurrency, async (g) => {
      const o = await this.request(g, signal);
      if (o.kind === 'multi-rejected') {
        this.noMultiRange(`HTTP ${o.status} to a multi-range request`);
        return this.fetchRuns(g, signal, true);
      }
      if (o.kind === 'whole-blob') this.noMultiRange('whole blob sent for a multi-range request');
      return o.spans;
    });
    return outs.flat();
  }

  private noMultiRange(why: string): void {
    if (this.d.hostState.multiRange) {
      this.d.hostState.multiRange = false;
      this.logger.info(
        { host: this.d.ep.host, why },
        'registry host does not do multi-range requests; using single ranges',
      );
    }
  }

  private request(ranges: ByteRange[], signal: AbortSignal): Promise<RangeOutcome> {
    const ctx = { ...this.ctx, offset: ranges[0]!.offset, ranges: ranges.length };
    return this.d.transport.send(
      {
        ep: this.d.ep,
        path: `blobs/${this.digest}`,
        headers: {
          range: `bytes=${ranges.map((r) => `${r.offset}-${r.offset + r.length - 1}`).join(',')}`,
          'accept-encoding': 'identity',
        },
        ref: this.d.ref,
        what: 'blob',
        signal,
        deadlineMs: this.d.fetchTimeoutMs,
        context: { digest: this.digest, offset: ranges[0]!.offset },
      },
      async (res) => {
        this.counters.requests++;
        const o = await consumeRangeResponse(res, ranges, this.size, this.digest, ctx);
        if (o.kind !== 'multi-rejected') this.counters.bytes += o.bytes;
        if (o.kind === 'whole-blob' && ranges.length === 1 && !this.d.hostState.ignoresRange) {
          this.d.hostState.ignoresRange = true;
          this.logger.warn(
            { host: this.d.ep.host },
            'registry ignores Range requests; every read downloads from the blob start',
          );
        }
        return o;
      },
    );
  }
}

/** Bytes [offset, offset+length) from sorted spans, zero-copy when one span covers them. */
function extract(spans: Span[], offset: number, length: number): Buffer | undefined {
  // last span starting at or before offset
  let lo = 0;
  let hi = spans.length - 1;
  let idx = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (spans[mid]!.offset <= offset) {
      idx = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  // spans may overlap (a server answering overlapping parts): look back for one covering everything
  for (let i = idx; i >= 0 && i > idx - 4; i--) {
    const s = spans[i]!;
    if (s.offset <= offset && s.offset + s.data.length >= offset + length) {
      return s.data.subarray(offset - s.offset, offset - s.offset + length);
    }
  }
  // stitch from consecutive spans
  const out = Buffer.allocUnsafe(length);
  let pos = offset;
  const end = offset + length;
  for (let i = Math.max(0, idx - 3); i < spans.length && pos < end; i++) {
    const s = spans[i]!;
    const sEnd = s.offset + s.data.length;
    if (s.offset > pos) break;
    if (sEnd <= pos) continue;
    const to = Math.min(end, sEnd);
    s.data.copy(out, pos - offset, pos - s.offset, to - s.offset);
    pos = to;
  }
  return pos >= end ? out : undefined;
}

async function mapLimit<T, R>(items: T[], limit: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        out[i] = await fn(items[i]!);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
