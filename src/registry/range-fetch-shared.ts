import { silentLogger, type Logger } from '../util/logger.js';
import { HostHealth, type HostHealthOptions } from './host-health.js';
import { HostRangeProfiles, type RangeProfileSnapshot } from './host-range-profile.js';
import { WholeBlobStreams, type PassingBytesSink } from './whole-blob-stream.js';

export interface RangeFetchSharedOptions extends HostHealthOptions {
  /** Most ranges in one multi-range request before a host taught us its limit (default 64). */
  maxRangesPerRequest?: number;
  /** Where whole-blob stream bytes nobody waits for go (the local compressed-bytes store). */
  sink?: PassingBytesSink;
  /** A whole-blob stream with no byte for this long fails (default 60 s). */
  streamIdleTimeoutMs?: number;
  /**
   * `ranged_reads = "split"` mirrors: a read starting more than this many bytes ahead of the
   * whole-blob stream goes to the next host instead of waiting (default 1 MiB).
   */
  splitAheadBytes?: number;
  logger?: Logger;
}

/**
 * Per-process state behind every RegistryBlobReader of one registry client: what each host does
 * with Range, which hosts are cooling down, the live whole-blob streams, and bytes per host.
 */
export class RangeFetchShared {
  readonly profiles: HostRangeProfiles;
  readonly health: HostHealth;
  readonly streams: WholeBlobStreams;
  readonly logger: Logger;
  readonly sink: PassingBytesSink | undefined;
  readonly splitAheadBytes: number;
  private readonly bytes = new Map<string, number>();
  private readonly requests = new Map<string, number>();

  constructor(o: RangeFetchSharedOptions = {}) {
    this.logger = o.logger ?? silentLogger;
    this.sink = o.sink;
    this.splitAheadBytes = o.splitAheadBytes ?? 1 << 20;
    this.profiles = new HostRangeProfiles(o.maxRangesPerRequest ?? 64, (host, what, snap) =>
      this.logger.info({ host, why: what, ...snap }, 'learned how this host answers Range requests'),
    );
    this.health = new HostHealth(o);
    this.streams = new WholeBlobStreams({
      ...(o.sink ? { sink: o.sink } : {}),
      ...(o.streamIdleTimeoutMs !== undefined ? { idleTimeoutMs: o.streamIdleTimeoutMs } : {}),
      logger: this.logger,
    });
  }

  count(origin: string, bytes: number, requests: number): void {
    if (bytes) this.bytes.set(origin, (this.bytes.get(origin) ?? 0) + bytes);
    if (requests) this.requests.set(origin, (this.requests.get(origin) ?? 0) + requests);
  }

  /** Blob body bytes and range requests per origin (status output, tests, the README figures). */
  traffic(): Record<string, { bytes: number; requests: number }> {
    const out: Record<string, { bytes: number; requests: number }> = {};
    for (const o of new Set([...this.bytes.keys(), ...this.requests.keys()])) {
      out[o] = { bytes: this.bytes.get(o) ?? 0, requests: this.requests.get(o) ?? 0 };
    }
    return out;
  }

  rangeProfiles(): Record<string, RangeProfileSnapshot> {
    return this.profiles.snapshot();
  }
}
