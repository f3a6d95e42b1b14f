import type { ByteRange } from './byte-ranges.js';

/**
 * What a host does with `Range` (learned from its answers, never configured):
 * - `multi`: multipart/byteranges for several ranges (Distribution, Zot up to its limit);
 * - `first-range-only`: a multi-range request gets a plain 206 for its first range (Dragonfly);
 * - `single`: multi-range requests are refused (400/404/416/501: Spegel, some CDNs);
 * - `ignores-range`: a single-range GET gets 200 and the whole blob (Distribution proxy on a miss).
 */
export type RangeMode = 'multi' | 'first-range-only' | 'single' | 'ignores-range';

export interface RangeProfileSnapshot {
  mode: RangeMode;
  /** Most ranges one request may carry (learned from 416s; 1 outside `multi`). */
  maxRanges: number;
  /** True once the mode was learned from an answer (false: still the optimistic default). */
  learned: boolean;
}

/**
 * One host's Range behaviour, learned once per process and shared by every blob on that host,
 * so the first misunderstanding costs one request and never recurs.
 */
export class HostRangeProfile {
  private mode: RangeMode = 'multi';
  private maxRanges: number;
  private learned = false;
  /** The host refused a multi-range request with 404: may be "no such blob", confirmed by a single read. */
  private unconfirmed404 = false;
  /**
   * The one request in flight to a host we know nothing about yet: concurrent reads wait for its
   * answer instead of all asking at once (200 readers each getting the whole blob from a host
   * that ignores Range would be 200 downloads).
   */
  probe?: Promise<unknown>;

  constructor(
    readonly host: string,
    maxRanges: number,
    private readonly onLearn?: (host: string, what: string, snap: RangeProfileSnapshot) => void,
  ) {
    this.maxRanges = Math.max(1, Math.floor(maxRanges));
  }

  snapshot(): RangeProfileSnapshot {
    return { mode: this.mode, maxRanges: this.maxRanges, learned: this.learned && !this.unconfirmed404 };
  }

  get ignoresRange(): boolean {
    return this.mode === 'ignores-range';
  }

  /** Split sorted, coalesced ranges into the requests this host answers properly. */
  plan(ranges: readonly ByteRange[]): ByteRange[][] {
    if (this.mode !== 'multi' || this.maxRanges <= 1) return ranges.map((r) => [r]);
    const out: ByteRange[][] = [];
    for (let i = 0; i < ranges.length; i += this.maxRanges) out.push(ranges.slice(i, i + this.maxRanges));
    return out;
  }

  /** A 206 to `asked` ranges covered only the first of them (and nothing else). */
  noteFirstRangeOnly(asked: number): void {
    if (asked > 1 && this.mode === 'multi') this.set('first-range-only', 1, 'answers only the first range');
  }

  /**
   * A multi-range request of `asked` ranges was refused with `status`. 416 with many ranges is a
   * range-count limit (Zot: 16): halve the limit. Anything else: single ranges.
   */
  noteMultiRejected(status: number, asked: number): void {
    if (this.mode !== 'multi') return;
    if (status === 416 && asked > 2) {
      this.set('multi', Math.min(this.maxRanges, Math.floor(asked / 2)), `HTTP 416 for ${asked} ranges`);
      return;
    }
    this.unconfirmed404 = status === 404;
    this.set('single', 1, `HTTP ${status} to a multi-range request`);
  }

  /** A single-range request was answered 404 (the blob is missing, whatever the multi-range 404 said). */
  noteSingleNotFound(): void {
    if (this.unconfirmed404) {
      this.unconfirmed404 = false;
      this.mode = 'multi';
      this.maxRanges = Math.max(this.maxRanges, 2);
      this.learned = false;
    }
  }

  /** A single-range request was served: a multi-range 404 meant "no multi-range", not "no blob". */
  noteSingleServed(): void {
    this.unconfirmed404 = false;
  }

  /** A 206 answered what was asked: the current mode is right. */
  confirm(): void {
    this.learned = true;
  }

  /** 200 and the whole blob to a ranged GET of `asked` ranges. */
  noteWholeBlob(asked: number): void {
    if (asked > 1) {
      // Go's ServeContent answers 200 to a range set larger than the blob: not proof of anything
      // for single ranges, so only multi-range is dropped.
      if (this.mode === 'multi') this.set('single', 1, '200 with the whole blob for a multi-range request');
      return;
    }
    if (this.mode !== 'ignores-range') this.set('ignores-range', 1, '200 with the whole blob for a range');
  }

  private set(mode: RangeMode, maxRanges: number, what: string): void {
    this.mode = mode;
    this.maxRanges = mode === 'multi' ? Math.max(2, maxRanges) : 1;
    this.learned = true;
    this.onLearn?.(this.host, what, this.snapshot());
  }
}

/** Profiles by origin (`scheme://host`), one map per registry client. */
export class HostRangeProfiles {
  private readonly byHost = new Map<string, HostRangeProfile>();

  constructor(
    private readonly maxRanges = 64,
    private readonly onLearn?: (host: string, what: string, snap: RangeProfileSnapshot) => void,
  ) {}

  get(origin: string): HostRangeProfile {
    let p = this.byHost.get(origin);
    if (!p) {
      p = new HostRangeProfile(origin, this.maxRanges, this.onLearn);
      this.byHost.set(origin, p);
    }
    return p;
  }

  /** What is known, for status output and tests. */
  snapshot(): Record<string, RangeProfileSnapshot> {
    const out: Record<string, RangeProfileSnapshot> = {};
    for (const [h, p] of this.byHost) out[h] = p.snapshot();
    return out;
  }
}
