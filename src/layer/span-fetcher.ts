import { raceAbort, raceWith } from '../util/abort.js';
import { checkLengths, type BlobRangeSource, type ByteRange } from '../util/blob-read.js';
import type { Clock } from '../util/clock.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { CompressedBytesSink, LocalCompressedBytes } from './compressed-store.js';
import { ProgressDelivery } from './progress-delivery.js';
import { spanBuffers } from '../util/span-buffers.js';

/** Who asks: on-demand reads and prefetch pin a shared fetch; background work may be preempted. */
export type Priority = 'on-demand' | 'prefetch' | 'background';

export interface SpanFetchOptions {
  priority: Priority;
  signal?: AbortSignal | undefined;
  /** Fetch from the origin: skip local compressed bytes (the DiffID re-check). */
  bypassCache?: boolean | undefined;
  /**
   * Compressed bytes of the network fetch this call starts, as they arrive (not those of fetches
   * it joins, nor local bytes). Read-ahead uses it to start its next step before this one ends.
   */
  onReceived?: ((bytes: number) => void) | undefined;
}

export interface SpanFetcherContext {
  source: BlobRangeSource;
  blobSize: number;
  localBytes?: LocalCompressedBytes | undefined;
  onCompressedBytes?: CompressedBytesSink | undefined;
  /** Compressed bytes received from the network (counted once per fetch). */
  onFetched(bytes: number): void;
  logger: Logger;
  context: ErrorContext;
  /** Time source for flight ages (the scheduler's clock). Without it flights never go stale. */
  clock?: Clock | undefined;
  /**
   * A flight older than this is not joined by on-demand or prefetch callers: they fetch again.
   * A request stuck on a hung registry would otherwise hold every later read of its span until the
   * request timeout ends it, long after the registry recovered. Default: never stale.
   */
  staleJoinMs?: number | undefined;
}

/** One network call for several spans; aborted only when every interested caller is background and gave up. */
interface Batch {
  ctl: AbortController;
  /** Callers that must not lose it (on-demand / prefetch). */
  pinned: number;
  /** Background callers still waiting. */
  background: number;
}

/**
 * Who still reads one network range's buffer: the flight table until the call settles, the local
 * store until its write is done, and each caller that took a segment of it until it says it is
 * done (`fetchLeased`). The last one gives the buffer back at once (util/span-buffers.ts: reused
 * or released), if the source took it there: a cold model read otherwise left every compressed
 * span to the next paced full GC, and filled a fresh mapping for every one. Plain `fetch` callers
 * never say so: buffers they took are left to the collector.
 */
class SpanLease {
  private holders = 1;
  /** Set once the call delivered it. */
  buf: Buffer | undefined;

  /** `reuse`: kept for the next fetch when given back; else released at once. */
  constructor(private readonly reuse: boolean) {}

  hold(): void {
    this.holders++;
  }

  drop(): void {
    if (--this.holders > 0 || this.buf === undefined) return;
    const b = this.buf;
    this.buf = undefined;
    spanBuffers.giveBack(b, { reuse: this.reuse });
  }
}

interface Flight {
  offset: number;
  end: number;
  promise: Promise<Buffer>;
  batch: Batch;
  lease: SpanLease;
  /** Clock time the network call started (0 without a clock). */
  startedAt: number;
}

interface Segment {
  offset: number;
  end: number;
  data: Promise<Buffer>;
  /** The flight whose buffer `data` is a view of (held for this caller until it is done). */
  lease?: SpanLease;
  /** A local read's buffer (util/span-buffers.ts): this caller's alone, given back at `release`. */
  own?: Buffer;
}

/** `SpanFetcher.fetchLeased`'s answer: the bytes, and what to call once done with them. */
export interface LeasedSpans {
  bufs: Buffer[];
  /**
   * The caller no longer reads `bufs` or any view of them (every decode of them settled): they
   * may be released. Call once; not calling it is safe (the collector frees them).
   */
  release(): void;
}

/** Joined flights that failed because someone else's fetch was aborted: re-planned this often. */
const MAX_REPLANS = 3;

/**
 * The per-layer table of compressed spans in flight: the one place where a layer's compressed
 * bytes are fetched. A request subtracts what is already in flight (and waits on it), reads what
 * the local compressed store holds, and fetches only the rest, in one call to the source. So
 * on-demand reads, prefetch and background fetch never fetch the same byte twice at once.
 */
export class SpanFetcher {
  /** Sorted by offset. */
  private flights: Flight[] = [];

  constructor(private readonly ctx: SpanFetcherContext) {}

  /** Spans currently in flight (tests, status). */
  inFlight(): ByteRange[] {
    return this.flights.map((f) => ({ offset: f.offset, length: f.end - f.offset }));
  }

  /** Are fetched bytes kept locally (a local compressed store with a sink)? */
  get keepsBytes(): boolean {
    return this.ctx.localBytes !== undefined && this.ctx.onCompressedBytes !== undefined;
  }

  /** Held by the local compressed store (stored or being stored): [offset, end) can be read back. */
  holdsLocally(offset: number, end: number): boolean {
    return this.keepsBytes && this.ctx.localBytes?.covered(offset, end - offset) === true;
  }

  /** Held by the local compressed store, or in flight: no need to fetch [offset, end) again. */
  holds(offset: number, end: number): boolean {
    return this.ctx.localBytes?.covered(offset, end - offset) === true || this.covers(offset, end);
  }

  /** Is all of [offset, end) inside spans in flight (not aborted)? */
  covers(offset: number, end: number): boolean {
    let pos = offset;
    for (const f of this.flights) {
      if (f.batch.ctl.signal.aborted || f.end <= pos) continue;
      if (f.offset > pos) return false;
      pos = f.end;
      if (pos >= end) return true;
    }
    return pos >= end;
  }

  /** Exactly the bytes of each range, same order. */
  async fetch(ranges: readonly ByteRange[], opts: SpanFetchOptions): Promise<Buffer[]> {
    return (await this.fetchLeased(ranges, opts)).bufs;
  }

  /**
   * `fetch`, for a caller that says when it is done with the bytes (`release`): buffers nobody
   * else reads then go back at once instead of at the next full garbage collection.
   */
  async fetchLeased(ranges: readonly ByteRange[], opts: SpanFetchOptions): Promise<LeasedSpans> {
    for (const r of ranges) {
      if (
        !Number.isSafeInteger(r.offset) ||
        !Number.isSafeInteger(r.length) ||
        r.offset < 0 ||
        r.length < 0 ||
        r.offset + r.length > this.ctx.blobSize
      ) {
        throw new StoreError('E_INVALID_ARGUMENT', 'compressed range outside the blob', {
          ...this.ctx.context,
          offset: r.offset,
          length: r.length,
        });
      }
    }
    for (let attempt = 1; ; attempt++) {
      const joined = new Set<Batch>();
      const segments = this.plan(ranges, opts, joined);
      const dropAll = (): void => {
        for (const s of segments) s.lease?.drop();
      };
      try {
        const all = Promise.all(segments.map(async (s) => ({ s, data: await s.data })));
        const parts = await (opts.priority === 'background'
          ? this.waitBackground(all, joined, opts.signal)
          : raceAbort(all, opts.signal));
        const out = ranges.map((r) => assemble(r, parts, this.ctx.context));
        let released = false;
        return {
          bufs: out.map((o) => o.buf),
          release: () => {
            if (released) return;
            released = true;
            dropAll();
            // copies stitched from several segments, and local reads, are this caller's alone
            for (const o of out) if (o.copied) spanBuffers.giveBack(o.buf);
            for (const s of segments) if (s.own !== undefined) spanBuffers.giveBack(s.own);
          },
        };
      } catch (err) {
        dropAll();
        // a shared fetch we joined was aborted by its own (background) owner: plan again
        if (
          opts.signal?.aborted ||
          attempt >= MAX_REPLANS ||
          ![...joined].some((b) => b.ctl.signal.aborted)
        ) {
          throw err;
        }
      } finally {
        for (const b of joined) this.leave(b, opts);
      }
    }
  }

  /**
   * A preempted background caller gives its fetches up, unless on-demand reads hold every one of
   * them: then the bytes come anyway, and the caller takes them instead of fetching them again.
   */
  private waitBackground<T>(
    all: Promise<T>,
    joined: Set<Batch>,
    signal: AbortSignal | undefined,
  ): Promise<T> {
    if (signal === undefined) return all;
    // checked a microtask later: the on-demand fetch that preempts us joins our spans in the
    // same synchronous run, just after aborting the background tasks
    return raceWith(all, signal, (reject) => {
      void Promise.resolve().then(() => {
        if ([...joined].every((b) => b.pinned > 0)) return;
        reject(signal.reason);
      });
    });
  }

  /** Cut the ranges into in-flight, local and new spans; start one batch for the new ones. */
  private plan(ranges: readonly ByteRange[], opts: SpanFetchOptions, joined: Set<Batch>): Segment[] {
    const segments: Segment[] = [];
    const fresh: Array<{ offset: number; end: number; segment: Segment }> = [];
    // a flight whose batch was aborted is about to fail: never join it; a reader does not join
    // one that has been running for longer than staleJoinMs (stuck on a hung host) either
    const staleBefore =
      opts.priority !== 'background' && this.ctx.clock !== undefined && this.ctx.staleJoinMs !== undefined
        ? this.ctx.clock.now() - this.ctx.staleJoinMs
        : -Infinity;
    const flights = this.flights.filter((f) => !f.batch.ctl.signal.aborted && f.startedAt >= staleBefore);
    const local = opts.bypassCache === true ? undefined : this.ctx.localBytes;
    const gap = (offset: number, end: number): void => {
      if (end <= offset) return;
      if (local?.held !== undefined && !local.covered(offset, end - offset)) {
        // partly held: the held parts locally, the holes from the network
        let pos = offset;
        for (const h of local.held(offset, end - offset)) {
          const from = Math.max(pos, h.offset);
          const to = Math.min(end, h.offset + h.length);
          if (to <= from) continue;
          network(pos, from);
          localSpan(from, to);
          pos = to;
        }
        network(pos, end);
        return;
      }
      if (local?.covered(offset, end - offset) === true) localSpan(offset, end);
      else network(offset, end);
    };
    const localSpan = (offset: number, end: number): void => {
      if (end <= offset || local === undefined) return;
      const seg: Segment = { offset, end, data: Promise.resolve(Buffer.alloc(0)) };
      seg.data = local
        .read(offset, end - offset, opts.signal)
        .then((b) => {
          if (b.length !== end - offset) throw new Error(`short local read (${b.length} of ${end - offset})`);
          seg.own = b;
          return b;
        })
        // a local copy that cannot be read is fetched again
        .catch((err: unknown) => {
          this.ctx.logger.debug({ err, offset }, 'local compressed bytes unreadable; fetching');
          const f = this.fetchNow([{ offset, end }], opts)[0]!;
          // held for this caller like any flight it takes (a caller that failed meanwhile never
          // drops it: that buffer is left to the collector)
          f.lease.hold();
          seg.lease = f.lease;
          return f.promise;
        });
      segments.push(seg);
    };
    const network = (offset: number, end: number): void => {
      if (end <= offset) return;
      const seg: Segment = { offset, end, data: Promise.resolve(Buffer.alloc(0)) };
      fresh.push({ offset, end, segment: seg });
      segments.push(seg);
    };
    for (const r of mergeRanges(ranges)) {
      let pos = r.offset;
      for (const f of flights) {
        if (f.end <= pos || f.offset >= r.end) continue;
        gap(pos, Math.min(f.offset, r.end));
        const from = Math.max(pos, f.offset);
        const to = Math.min(r.end, f.end);
        const base = f.offset;
        f.lease.hold();
        segments.push({
          offset: from,
          end: to,
          data: f.promise.then((b) => b.subarray(from - base, to - base)),
          lease: f.lease,
        });
        if (!joined.has(f.batch)) {
          joined.add(f.batch);
          this.join(f.batch, opts);
        }
        pos = to;
        if (pos >= r.end) break;
      }
      gap(pos, r.end);
    }
    if (fresh.length > 0) {
      const started = this.fetchNow(fresh, opts, joined);
      fresh.forEach((f, i) => {
        const flight = started[i]!;
        flight.lease.hold();
        f.segment.data = flight.promise;
        f.segment.lease = flight.lease;
      });
    }
    return segments;
  }

  /** Start one network call for `spans`, registered in the in-flight table while it runs. */
  private fetchNow(
    spans: ReadonlyArray<{ offset: number; end: number }>,
    opts: SpanFetchOptions,
    joined?: Set<Batch>,
  ): Flight[] {
    const batch: Batch = { ctl: new AbortController(), pinned: 0, background: 0 };
    // background units come at a paced rate: a free buffer kept for the next one would stay
    // resident between them, while a fresh one costs little at that rate (on-demand reads
    // stream back to back: theirs are reused)
    const leases = spans.map(() => new SpanLease(opts.priority !== 'background'));
    if (joined !== undefined) {
      joined.add(batch);
      this.join(batch, opts);
    } else if (opts.priority !== 'background') {
      // a local-read fallback: nobody else holds it, keep it alive until it settles
      batch.pinned++;
    }
    const ranges = spans.map((s) => ({ offset: s.offset, length: s.end - s.offset }));
    this.ctx.logger.debug(
      {
        priority: opts.priority,
        ranges: ranges.length,
        offset: ranges[0]?.offset,
        bytes: ranges.reduce((a, r) => a + r.length, 0),
      },
      'span fetch',
    );
    // a background batch may be given up half way: its bytes go to the local store as they arrive
    const progress =
      opts.priority === 'background' && this.ctx.onCompressedBytes !== undefined
        ? new ProgressDelivery((offset, data) => this.deliver(offset, data))
        : undefined;
    const received = opts.onReceived;
    const onProgress =
      progress === undefined && received === undefined
        ? undefined
        : (offset: number, data: Buffer): void => {
            progress?.onProgress(offset, data);
            try {
              received?.(data.length);
            } catch (err) {
              this.ctx.logger.debug({ err }, 'progress callback failed');
            }
          };
    const call = this.ctx.source
      .readRanges(ranges, {
        signal: batch.ctl.signal,
        bypassCache: opts.bypassCache === true,
        ...(onProgress !== undefined ? { onProgress } : {}),
      })
      .then(
        (bufs) => {
          checkLengths(ranges, bufs, this.ctx.context);
          let total = 0;
          for (let i = 0; i < ranges.length; i++) {
            total += ranges[i]!.length;
            const lease = leases[i]!;
            lease.buf = bufs[i]!;
            // streamed to the sink in views as it arrived: held until the sink's writes of
            // them settled
            const writing =
              progress !== undefined
                ? (progress.deliverRest(ranges[i]!.offset, bufs[i]!), progress.settled())
                : this.deliver(ranges[i]!.offset, bufs[i]!);
            if (writing !== undefined) {
              lease.hold();
              const drop = (): void => lease.drop();
              writing.then(drop, drop);
            }
          }
          this.ctx.onFetched(total);
          return bufs;
        },
        (err: unknown) => {
          // what arrived before the fetch failed or was given up is kept (and counted) all the same
          if (progress !== undefined) {
            progress.flush();
            if (progress.deliveredBytes > 0) this.ctx.onFetched(progress.deliveredBytes);
          }
          throw err;
        },
      );
    const startedAt = this.ctx.clock?.now() ?? 0;
    const flights = spans.map((s, i): Flight => ({
      offset: s.offset,
      end: s.end,
      batch,
      lease: leases[i]!,
      startedAt,
      promise: call.then((b) => b[i]!),
    }));
    for (const f of flights) f.promise.catch(() => undefined);
    // kept sorted by offset here, once, for covers() and plan() (called for every read)
    this.flights.push(...flights);
    this.flights.sort((a, b) => a.offset - b.offset);
    const done = (): void => {
      this.flights = this.flights.filter((f) => f.batch !== batch);
      // the table's hold: no later caller can join these flights
      for (const l of leases) l.drop();
    };
    call.then(done, done);
    return flights;
  }

  /** Hand bytes to the sink; the promise it may return settles once it no longer reads them. */
  private deliver(offset: number, data: Buffer): Promise<unknown> | undefined {
    const sink = this.ctx.onCompressedBytes;
    if (sink === undefined) return undefined;
    try {
      return sink(offset, data) ?? undefined;
    } catch (err) {
      this.ctx.logger.warn({ err, offset }, 'compressed bytes sink failed');
      return undefined;
    }
  }

  private join(b: Batch, opts: SpanFetchOptions): void {
    if (opts.priority === 'background') b.background++;
    else b.pinned++;
  }

  /**
   * A caller is done with a batch. A background caller that gave up (preempted, cancelled) aborts
   * the batch when no on-demand/prefetch caller holds it and no other background caller waits.
   */
  private leave(b: Batch, opts: SpanFetchOptions): void {
    if (opts.priority === 'background') b.background--;
    else b.pinned--;
    if (opts.signal?.aborted && b.pinned <= 0 && b.background <= 0 && !b.ctl.signal.aborted) {
      b.ctl.abort(opts.signal.reason);
    }
  }
}

function mergeRanges(ranges: readonly ByteRange[]): Array<{ offset: number; end: number }> {
  const sorted = ranges.filter((r) => r.length > 0).sort((a, b) => a.offset - b.offset);
  const out: Array<{ offset: number; end: number }> = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last !== undefined && r.offset <= last.end) last.end = Math.max(last.end, r.offset + r.length);
    else out.push({ offset: r.offset, end: r.offset + r.length });
  }
  return out;
}

/**
 * Bytes of `r` from the resolved segments: a view when one segment holds them all, else a copy
 * (`copied`: the caller's alone).
 */
function assemble(
  r: ByteRange,
  parts: ReadonlyArray<{ s: Segment; data: Buffer }>,
  ctx: ErrorContext,
): { buf: Buffer; copied: boolean } {
  if (r.length === 0) return { buf: Buffer.alloc(0), copied: false };
  const end = r.offset + r.length;
  const covering = parts.filter((p) => p.s.offset < end && p.s.end > r.offset);
  if (covering.length === 1) {
    const p = covering[0]!;
    if (p.s.offset <= r.offset && p.s.end >= end)
      return { buf: p.data.subarray(r.offset - p.s.offset, end - p.s.offset), copied: false };
  }
  covering.sort((a, b) => a.s.offset - b.s.offset);
  const out = spanBuffers.take(r.length);
  let pos = r.offset;
  for (const p of covering) {
    if (p.s.offset > pos) break;
    const to = Math.min(end, p.s.end);
    if (to <= pos) continue;
    p.data.copy(out, pos - r.offset, pos - p.s.offset, to - p.s.offset);
    pos = to;
  }
  if (pos !== end) {
    throw new StoreError('E_IO', 'compressed range not covered after fetch', { ...ctx, offset: r.offset });
  }
  return { buf: out, copied: true };
}
