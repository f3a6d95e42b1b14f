import { StoreError, type ErrorContext } from '../util/errors.js';
import type { ByteRange } from './byte-ranges.js';
import type { Endpoint } from './hosts.js';
import { consumeRangeOrStream, type Span } from './range-fetch.js';
import type { RangeFetchShared } from './range-fetch-shared.js';
import type { Transport } from './transport.js';
import type { WholeBlobStream } from './whole-blob-stream.js';

/** What the stream path of one blob reader needs from it. */
export interface BlobStreamContext {
  transport: Transport;
  shared: RangeFetchShared;
  ref: string;
  digest: string;
  size: number;
  fetchTimeoutMs: number;
  /** The reader's counters: whole-blob streams it starts count against it. */
  counters: { requests: number; bytes: number };
  ctx: ErrorContext;
}

/**
 * The whole-blob stream side of a registry blob reader (hosts that ignore Range): join the one
 * live stream of (host, blob) for the ranges it can still deliver, start it when there is none,
 * and feed a 200 response into it. Split from blob-reader.ts, which plans range requests.
 */
export class BlobStreamReads {
  constructor(private readonly o: BlobStreamContext) {}

  /**
   * Join `stream` for each range it can still deliver. Left out (`behind`): ranges it passed, and
   * for a `split` mirror with a host behind it, ranges too far ahead to wait for.
   */
  wantAll(
    stream: WholeBlobStream,
    ranges: readonly ByteRange[],
    signal: AbortSignal | undefined,
    ep: Endpoint,
    isLast: boolean,
  ): { waits: Array<Promise<Span>>; behind: ByteRange[] } {
    const waits: Array<Promise<Span>> = [];
    const behind: ByteRange[] = [];
    const limit =
      ep.rangedReads === 'split' && !isLast ? stream.position + this.o.shared.splitAheadBytes : Infinity;
    for (const r of ranges) {
      if (r.offset >= limit) {
        behind.push(r);
        continue;
      }
      const p = stream.want(r.offset, r.length, signal);
      if (p) waits.push(p.then((data) => ({ offset: r.offset, data })));
      else behind.push(r);
    }
    return { waits, behind };
  }

  /**
   * Serve ranges from the live whole-blob stream of (ep, blob), starting one (a plain GET) when
   * there is none. Ranges already behind the stream come back in `behind`.
   */
  async viaStream(
    ep: Endpoint,
    live: WholeBlobStream | undefined,
    ranges: ByteRange[],
    signal: AbortSignal | undefined,
    isLast: boolean,
  ): Promise<{ spans: Span[]; behind: ByteRange[]; stream: WholeBlobStream | undefined }> {
    if (!live && !this.o.shared.sink && ep.rangedReads === 'split' && !isLast) {
      // nothing would wait on a new stream and nothing keeps its bytes: do not start one
      const limit = this.o.shared.splitAheadBytes;
      if (ranges.every((r) => r.offset >= limit)) {
        return { spans: [], behind: ranges, stream: undefined };
      }
    }
    const stream = live ?? this.o.shared.streams.create(ep.origin, this.o.digest, this.o.size);
    const { waits, behind } = this.wantAll(stream, ranges, signal, ep, isLast);
    if (!live) this.openStream(ep, stream);
    return { spans: await Promise.all(waits), behind, stream };
  }

  /** GET the whole blob for `stream` (no Range: the host would ignore it) under the stream's own life. */
  private openStream(ep: Endpoint, stream: WholeBlobStream): void {
    this.o.shared.logger.info(
      { host: ep.host, digest: this.o.digest },
      'streaming the whole blob once from this host',
    );
    const ctl = new AbortController();
    void stream.ended.then(() => ctl.abort(new StoreError('E_ABORTED', 'stream over', this.o.ctx)));
    this.o.transport
      .send(
        {
          ep,
          path: `blobs/${this.o.digest}`,
          headers: { 'accept-encoding': 'identity' },
          ref: this.o.ref,
          what: 'blob',
          signal: ctl.signal,
          deadlineMs: this.o.fetchTimeoutMs,
          context: { digest: this.o.digest },
        },
        async (res) => {
          this.o.counters.requests++;
          this.o.shared.count(ep.origin, 0, 1);
          const ctx = { ...this.o.ctx, host: ep.host };
          const o = await consumeRangeOrStream(
            res,
            [{ offset: 0, length: this.o.size }],
            this.o.size,
            this.o.digest,
            ctx,
          );
          if (o.kind === 'whole-blob-stream') return o.res;
          if (o.kind === 'multi-rejected')
            throw new StoreError('E_REGISTRY_PROTOCOL', 'unexpected answer', ctx);
          // A 206 for the whole blob: fine, but consumeRangeOrStream read it already
          throw new StoreError('E_REGISTRY_PROTOCOL', 'expected the whole blob, got a partial answer', ctx);
        },
      )
      .then(
        (res) => this.feed(ep, stream, res),
        (err: unknown) => stream.fail(err),
      );
  }

  /** Run `stream` from a 200 response, counting its bytes against the host. */
  feed(
    ep: Endpoint,
    stream: WholeBlobStream,
    res: { body: AsyncIterable<Buffer> & { destroy(e?: Error): unknown } },
  ): void {
    const counters = this.o.counters;
    const shared = this.o.shared;
    async function* counted(): AsyncGenerator<Buffer> {
      for await (const b of res.body) {
        counters.bytes += b.length;
        shared.count(ep.origin, b.length, 0);
        yield b;
      }
    }
    stream.run({
      body: counted(),
      abort: (reason) => {
        res.body.destroy(reason instanceof Error ? reason : undefined);
      },
    });
  }
}
