import { mapLimit } from '../util/async.js';
import { checkLengths, type BlobRangeSource, type ReadRangesOptions } from '../util/blob-read.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { checkRange, type RangeReader } from '../util/range-reader.js';
import type { BlockCache } from './block-cache.js';
import { coalesce, type ByteRange } from './byte-ranges.js';
import type { Endpoint } from './hosts.js';
import { consumeRangeResponse, type RangeOutcome, type Span } from './range-fetch.js';
import { abortedError } from './signals.js';
import type { Transport } from './transport.js';

export type { ByteRange } from './byte-ranges.js';

export interface BlobReaderStats {
  /** HTTP range requests answered (retried attempts that failed by status are not counted). */
  requests: number;
  /** Response body bytes received. */
  bytes: number;
  /** Always 0: the reader keeps no cache (kept for status output compatibility). */
  cacheHits: number;
}

/**
 * Random access to one registry blob: the blob-read contract (util/blob-read.ts). `read` and
 * `readRanges` return exactly the requested bytes or throw a StoreError (E_DEADLINE, E_ABORTED,
 * E_REGISTRY_*, E_TRUNCATED); never short or misplaced data. Returned buffers may be views of a
 * response body: treat them as read-only.
 */
export interface BlobReader extends RangeReader, BlobRangeSource {
  readonly digest: string;
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
  /** Unused: the reader fetches exact ranges (kept so callers need not change). */
  blockSize?: number;
  /** Unused: the reader keeps no block cache. */
  cache?: BlockCache;
  hostState: HostRangeState;
  forceSingleRange: boolean;
  /** Budget for one fetch including retries (Go: `fetching_timeout_sec` 300). */
  fetchTimeoutMs: number;
  maxRangesPerRequest: number;
  /** Parallel requests when ranges must be fetched one per request. */
  concurrency: number;
  /** In single-range mode, gaps up to this many bytes are fetched rather than split into two requests. */
  singleRangeGap: number;
  /** Unused: read-ahead lives in the layer engine (src/layer), not here. */
  readAheadBytes?: number;
  logger?: Logger;
}

/**
 * A registry blob read by exact byte ranges: each call fetches what it is asked for (ranges that
 * overlap or touch are merged; several ranges go into one multi-range request where the host
 * allows it), nothing more, no cache and no read-ahead. Sharing spans between concurrent readers
 * and reading ahead are the layer engine's job (src/layer/span-fetcher.ts), the one place that
 * knows what is in flight, so the reader never fetches overlapping ranges on its own.
 * `bypassCache` needs nothing here: nothing is cached.
 */
export class RegistryBlobReader implements BlobReader {
  readonly digest: string;
  readonly size: number;
  private readonly counters: BlobReaderStats = { requests: 0, bytes: 0, cacheHits: 0 };
  private readonly logger: Logger;
  private readonly ctx: ErrorContext;

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
    const [buf] = await this.readRanges([{ offset, length }], { signal });
    return buf!;
  }

  async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    for (const r of ranges) checkRange(this.size, r.offset, r.length);
    const signal = opts.signal ?? new AbortController().signal;
    if (signal.aborted) throw abortedError(signal, this.ctx);
    const runs = coalesce(ranges);
    let spans = runs.length === 0 ? [] : await this.fetchRuns(runs, signal, false);
    let missing = runs.filter((r) => extract(sorted(spans), r.offset, r.length) === undefined);
    if (missing.length > 0) {
      // e.g. a 206 that served only some of a multi-range request: ask again for the rest, one range each
      this.logger.debug({ ...this.ctx, ranges: missing.length }, 'refetching ranges the registry left out');
      spans = [...spans, ...(await this.fetchRuns(missing, signal, true))];
      missing = missing.filter((r) => extract(sorted(spans), r.offset, r.length) === undefined);
      if (missing.length > 0) {
        throw new StoreError(
          'E_REGISTRY_PROTOCOL',
          `registry did not return ${missing.length} requested range(s)`,
          {
            ...this.ctx,
            offset: missing[0]!.offset,
          },
        );
      }
    }
    const all = sorted(spans);
    const out = ranges.map((r) => (r.length === 0 ? Buffer.alloc(0) : extract(all, r.offset, r.length)!));
    checkLengths(ranges, out, this.ctx);
    return out;
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

function sorted(spans: Span[]): Span[] {
  return [...spans].sort((a, b) => a.offset - b.offset);
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
