import { mapLimit } from '../util/async.js';
import { checkLengths, type BlobRangeSource, type ReadRangesOptions } from '../util/blob-read.js';
import { isStoreError, StoreError, type ErrorContext } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { checkRange, type RangeReader } from '../util/range-reader.js';
import { coalesce, rangeHeader, type ByteRange } from './byte-ranges.js';
import type { Endpoint } from './hosts.js';
import { consumeRangeOrStream, type RangeOutcome, type Span } from './range-fetch.js';
import { abortedError, raceSignal } from '../util/abort.js';
import type { Transport } from './transport.js';
import { RangeFetchShared } from './range-fetch-shared.js';
import { covered, extract, subtract } from './span-bytes.js';
import { BlobStreamReads } from './blob-stream-reads.js';

export type { ByteRange } from './byte-ranges.js';

/** Blob bytes as they arrive (ReadRangesOptions.onProgress). */
type Progress = (offset: number, data: Buffer) => void;
export { RangeFetchShared, type RangeFetchSharedOptions } from './range-fetch-shared.js';

export interface BlobReaderStats {
  /** HTTP requests answered for this blob (range requests and whole-blob streams). */
  requests: number;
  /** Response body bytes received for this blob, whole-blob streams this reader started included. */
  bytes: number;
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

export interface RegistryBlobReaderOptions {
  transport: Transport;
  shared: RangeFetchShared;
  /** Mirrors first, then the registry (resolveEndpoints order). */
  endpoints: readonly Endpoint[];
  /** Image reference (credential lookup). */
  ref: string;
  digest: string;
  size: number;
  /** Budget for one request including retries (Go `fetching_timeout_sec`). */
  fetchTimeoutMs: number;
  /** Never send multi-range requests (Go `force_single_range_mode`). */
  forceSingleRange?: boolean;
  /** Parallel requests per fetch when ranges need several (default 4). */
  concurrency?: number;
  /**
   * Hosts that take one range per request: ranges at most this many bytes apart share one
   * request (default 0: exact ranges; the gap bytes are fetched and dropped).
   */
  singleRangeGap?: number;
}

/** Rounds of re-asking one host for bytes its answers left out, without progress, before giving up. */
const MAX_IDLE_ROUNDS = 8;

/**
 * Exact byte ranges of one blob from the best host that has them. Every answer is checked
 * against the request; each host's Range behaviour is learned once (HostRangeProfile); a host that
 * ignores Range streams the blob once and that stream answers every read waiting on it
 * (WholeBlobStream); a failing mirror is skipped to the next host and cooled down (HostHealth);
 * a mirror configured `ranged_reads = "next-host"` gets no range reads at all.
 *
 * Each call fetches what it is asked for (ranges that overlap or touch are merged; several ranges
 * go into one multi-range request where the host allows it), nothing more: no block cache and no
 * read-ahead. Sharing spans between concurrent reads and reading ahead are the layer engine's job
 * (src/layer), the one place that knows what is in flight, so the reader never fetches
 * overlapping ranges on its own. The only bytes it answers without a host are those a whole-blob
 * stream passed to the sink's store (the local compressed-bytes store), and `bypassCache` turns
 * that off.
 */
export class RegistryBlobReader implements BlobReader {
  readonly digest: string;
  readonly size: number;
  private readonly logger: Logger;
  private readonly ctx: ErrorContext;
  private readonly counters: BlobReaderStats = { requests: 0, bytes: 0 };
  private readonly streamReads: BlobStreamReads;

  constructor(private readonly o: RegistryBlobReaderOptions) {
    this.digest = o.digest;
    this.size = o.size;
    this.logger = o.shared.logger;
    this.ctx = { digest: o.digest };
    if (o.endpoints.length === 0) throw new StoreError('E_CONFIG', 'no registry endpoint', this.ctx);
    this.streamReads = new BlobStreamReads({
      transport: o.transport,
      shared: o.shared,
      ref: o.ref,
      digest: o.digest,
      size: o.size,
      fetchTimeoutMs: o.fetchTimeoutMs,
      counters: this.counters,
      ctx: this.ctx,
    });
  }

  stats(): BlobReaderStats {
    return { ...this.counters };
  }

  /** The host this blob was found on (the first one reads try). */
  get endpoint(): Endpoint {
    return this.o.endpoints[0]!;
  }

  /** RangeReader shape (format/ reads through it): exactly [offset, offset+length). */
  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    checkRange(this.size, offset, length);
    if (length === 0) return Buffer.alloc(0);
    const [b] = await this.fetchRanges([{ offset, length }], signal);
    return b!;
  }

  /**
   * The blob-read contract (`readRanges(ranges, { signal, bypassCache })`): one buffer per range.
   * `bypassCache`: never answer from the sink's store (bytes come from a host).
   */
  async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    const out = await this.fetchRanges(ranges, opts.signal, {
      bypassCache: opts.bypassCache === true,
      onProgress: opts.onProgress,
    });
    checkLengths(ranges, out, this.ctx);
    return out;
  }

  /**
   * Bytes of each range in `ranges` (any order, overlaps allowed), one buffer per range, exactly
   * its length. Throws a StoreError when no host delivers them (the last host's error).
   */
  private async fetchRanges(
    ranges: readonly ByteRange[],
    signal?: AbortSignal,
    opts: { bypassCache?: boolean; onProgress?: Progress | undefined } = {},
  ): Promise<Buffer[]> {
    const useSink = opts.bypassCache !== true;
    for (const r of ranges) checkRange(this.size, r.offset, r.length);
    if (signal?.aborted) throw abortedError(signal, this.ctx);
    let missing = coalesce(ranges);
    const got: Span[] = [];
    const eps = this.candidates();
    let lastErr: unknown;
    // hosts that delivered part and can deliver the rest if the hosts after them fail (a
    // whole-blob stream that passed those bytes, or was too far from them to wait)
    const fallbacks: Endpoint[] = [];
    for (let i = 0; i < eps.length && missing.length > 0; i++) {
      const ep = eps[i]!;
      const isLast = i === eps.length - 1;
      try {
        const spans = await this.fromHost(ep, missing, signal, isLast, useSink, opts.onProgress);
        got.push(...spans);
        missing = subtract(missing, spans);
        this.o.shared.health.succeeded(ep.origin);
        if (missing.length > 0) fallbacks.push(ep);
      } catch (err) {
        if (signal?.aborted) throw abortedError(signal, this.ctx);
        if (isStoreError(err, 'E_ABORTED')) throw err;
        lastErr = err;
        const code = isStoreError(err) ? err.code : 'E_IO';
        if (code === 'E_REGISTRY_NOT_FOUND') this.o.shared.health.blobMissing(ep.origin, this.digest);
        else this.o.shared.health.hostFailed(ep.origin);
        if (isLast && fallbacks.length === 0) throw err;
        this.logger.warn(
          { host: ep.host, digest: this.digest, code, status: isStoreError(err) ? err.context.status : '' },
          isLast ? 'blob host failed; waiting on an earlier host' : 'blob host failed; trying the next host',
        );
      }
    }
    for (const ep of fallbacks) {
      if (missing.length === 0) break;
      try {
        const spans = await this.fromHost(ep, missing, signal, true, useSink, opts.onProgress);
        got.push(...spans);
        missing = subtract(missing, spans);
      } catch (err) {
        if (signal?.aborted) throw abortedError(signal, this.ctx);
        lastErr = err;
      }
    }
    if (missing.length > 0) {
      throw (
        lastErr ??
        new StoreError('E_REGISTRY_PROTOCOL', 'no host returned the requested bytes', {
          ...this.ctx,
          offset: missing[0]!.offset,
        })
      );
    }
    got.sort((a, b) => a.offset - b.offset);
    return ranges.map((r) => extract(got, r, this.ctx));
  }

  /** Hosts for range reads, in order, cooling ones last; `next-host` mirrors left out. */
  private candidates(): Endpoint[] {
    const eps = this.o.endpoints;
    const last = eps[eps.length - 1]!;
    const usable = eps.filter((ep) => ep === last || ep.rangedReads !== 'next-host');
    return this.o.shared.health.order(usable, this.digest);
  }

  /**
   * What `ep` delivers of `ranges`. May return less than asked only when `isLast` is false and the
   * host can no longer deliver some bytes (they passed its whole-blob stream already).
   */
  private async fromHost(
    ep: Endpoint,
    ranges: ByteRange[],
    signal: AbortSignal | undefined,
    isLast: boolean,
    useSink: boolean,
    onProgress?: Progress,
  ): Promise<Span[]> {
    const profile = this.o.shared.profiles.get(ep.origin);
    const out: Span[] = [];
    let missing = ranges;
    let idle = 0;
    while (missing.length > 0) {
      if (signal?.aborted) throw abortedError(signal, this.ctx);
      const before = covered(missing);
      const live = this.o.shared.streams.get(ep.origin, this.digest);
      if (live || profile.ignoresRange) {
        // a stream over: what it passed is in the sink's store, never worth a second stream
        if (!live && useSink && this.o.shared.sink?.readPassed) {
          const kept = await this.fromSink(missing);
          out.push(...kept);
          missing = subtract(missing, kept);
          if (missing.length === 0) break;
        }
        const r = await this.streamReads.viaStream(
          ep,
          this.o.shared.streams.get(ep.origin, this.digest),
          missing,
          signal,
          isLast,
        );
        out.push(...r.spans);
        missing = r.behind;
        if (missing.length === 0) break;
        // bytes the stream passed went to the sink: its store may hand them back
        const kept = useSink ? await this.fromSink(missing) : [];
        out.push(...kept);
        missing = subtract(missing, kept);
        if (missing.length === 0) break;
        // bytes that passed the stream already: another host, else the next stream
        if (!isLast) return out;
        if (r.stream) await r.stream.ended;
        continue;
      }
      if (!profile.snapshot().learned && profile.probe) {
        // another read is asking this host its first question: wait for the answer, then plan
        await raceSignal(profile.probe, signal, this.ctx);
        continue;
      }
      const singles = this.o.forceSingleRange || profile.snapshot().maxRanges <= 1;
      const groups = singles
        ? coalesce(missing, this.o.singleRangeGap ?? 0).map((r) => [r])
        : profile.plan(missing);
      // A host we know nothing about yet gets one request first: its answer decides the rest.
      const first = profile.snapshot().learned ? [] : groups.splice(0, 1);
      const spans: Span[] = [];
      if (first.length > 0) {
        // the probe settles as soon as the host's answer is known (for a 200: once the stream
        // exists), so the reads waiting on it join the stream before their bytes pass
        let answered!: () => void;
        const probe = new Promise<void>((r) => (answered = r));
        profile.probe = probe;
        const p = this.rangeRequest(ep, first[0]!, signal, isLast, answered, onProgress);
        void p
          .catch(() => undefined)
          .finally(() => {
            answered();
            if (profile.probe === probe) profile.probe = undefined;
          });
        spans.push(...(await p));
      }
      const results = await mapLimit(groups, this.o.concurrency ?? 4, (g) =>
        this.rangeRequest(ep, g, signal, isLast, undefined, onProgress),
      );
      for (const s of results) spans.push(...s);
      out.push(...spans);
      missing = subtract(missing, spans);
      idle = covered(missing) < before ? 0 : idle + 1;
      if (idle > MAX_IDLE_ROUNDS) {
        throw new StoreError('E_REGISTRY_PROTOCOL', 'host keeps leaving requested bytes out', {
          ...this.ctx,
          host: ep.host,
          offset: missing[0]!.offset,
        });
      }
    }
    return out;
  }

  /** Ranges the sink's store holds (whole ranges only). */
  private async fromSink(ranges: ByteRange[]): Promise<Span[]> {
    const sink = this.o.shared.sink;
    if (!sink?.readPassed) return [];
    const out: Span[] = [];
    for (const r of ranges) {
      try {
        const data = await sink.readPassed(this.digest, r.offset, r.length);
        if (data && data.length === r.length) out.push({ offset: r.offset, data });
      } catch (err) {
        this.logger.debug({ ...this.ctx, err: (err as Error).message }, 'passing-bytes store read failed');
      }
    }
    return out;
  }

  /** One GET with a Range header; learns from the answer; returns the spans it delivered. */
  private async rangeRequest(
    ep: Endpoint,
    g: ByteRange[],
    signal: AbortSignal | undefined,
    isLast: boolean,
    answered?: () => void,
    onProgress?: Progress,
  ): Promise<Span[]> {
    const profile = this.o.shared.profiles.get(ep.origin);
    const ctx = { ...this.ctx, host: ep.host, offset: g[0]!.offset, ranges: g.length };
    let outcome: RangeOutcome;
    try {
      outcome = await this.o.transport.send(
        {
          ep,
          path: `blobs/${this.digest}`,
          headers: { range: rangeHeader(g), 'accept-encoding': 'identity' },
          ref: this.o.ref,
          what: 'blob',
          ...(signal ? { signal } : {}),
          deadlineMs: this.o.fetchTimeoutMs,
          context: { digest: this.digest, offset: g[0]!.offset },
          // with a host behind this one, fail over rather than wait through the whole backoff
          ...(isLast ? {} : { maxRetries: 1 }),
        },
        async (res) => {
          this.counters.requests++;
          this.o.shared.count(ep.origin, 0, 1);
          return consumeRangeOrStream(res, g, this.size, this.digest, ctx, onProgress);
        },
      );
    } catch (err) {
      if (g.length === 1 && isStoreError(err, 'E_REGISTRY_NOT_FOUND')) profile.noteSingleNotFound();
      throw err;
    }
    switch (outcome.kind) {
      case 'parts': {
        this.counters.bytes += outcome.bytes;
        this.o.shared.count(ep.origin, outcome.bytes, 0);
        const rest = g.slice(1);
        if (rest.length > 0 && subtract(rest, outcome.spans).length === rest.length) {
          if (subtract([g[0]!], outcome.spans).length === 0) profile.noteFirstRangeOnly(g.length);
        } else {
          profile.confirm();
        }
        if (g.length === 1) profile.noteSingleServed();
        return outcome.spans;
      }
      case 'multi-rejected':
        profile.noteMultiRejected(outcome.status, g.length);
        return [];
      case 'whole-blob-stream': {
        profile.noteWholeBlob(g.length);
        const res = outcome.res;
        if (this.o.shared.streams.get(ep.origin, this.digest)) {
          // another read's request started the one stream allowed: hang up, wait on that one
          res.body.destroy();
          return [];
        }
        const splitFar =
          ep.rangedReads === 'split' && !isLast && g.every((r) => r.offset >= this.o.shared.splitAheadBytes);
        if (splitFar && !this.o.shared.sink) {
          // nobody would wait on this stream and nothing keeps its bytes: hang up now
          res.body.destroy();
          answered?.();
          return [];
        }
        const stream = this.o.shared.streams.create(ep.origin, this.digest, this.size);
        const waits = this.streamReads.wantAll(stream, g, signal, ep, isLast).waits;
        this.streamReads.feed(ep, stream, res);
        answered?.();
        return Promise.all(waits);
      }
    }
  }
}
