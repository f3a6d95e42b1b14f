import type { ImageRef } from '../registry/reference.js';
import type { Digest } from '../util/digest.js';
import { StoreError } from '../util/errors.js';
import type { LayerRecord } from './record.js';
import type { LayerHandle } from './layer-pool.js';

export interface ResolvedLayer {
  readonly record: LayerRecord;
  /** Fixed for the life of the resolution (the kernel caches its size). */
  readonly info: Buffer;
  readonly handle: LayerHandle;
  readonly infoIno: number;
  readonly blobIno: number;
}

/** Why a layer is not served lazily: answered as ENOENT so the client pulls normally. */
export class NotLazyError extends StoreError {
  constructor(
    readonly reason: string,
    context: Record<string, string | number | undefined>,
    cause?: unknown,
  ) {
    super('E_NOT_FOUND', `layer is not served lazily: ${reason}`, context, { cause });
    this.name = 'NotLazyError';
  }
}

/** One looked-up name `(ref, digest)`. */
export interface Entry {
  /** The reference as parsed at the ALS edge (passed to the registry as is). */
  image: ImageRef;
  /** Its canonical string (keys, records, logs). */
  ref: string;
  digest: Digest;
  inflight?: Promise<ResolvedLayer>;
  startedAt: number;
  resolved?: ResolvedLayer;
  failure?: { error: NotLazyError; until: number };
  lastError?: string;
  /** A record of this name is on disk: its failures are transient and never remembered. */
  hasRecord?: boolean;
  /** Next time an estimated diff-size may be replaced by a measured one. */
  sizeCheckAt?: number;
  /** Resolved ahead of the client (another layer of its image was looked up first). */
  eager?: boolean;
  /** A client asked for this eagerly started name before it was resolved (ms timestamp). */
  askedAt?: number;
  /** Time its TOC parse was held back for parses clients waited on (store/parse-gate.ts). */
  heldMs?: number;
}

/** Someone waits for this name: looked up by a client, or resolved ahead and asked for since. */
export function isDemanded(e: Entry): boolean {
  return e.eager !== true || e.askedAt !== undefined;
}

export function nameKey(ref: ImageRef | string, digest: string): string {
  return `${String(ref)}\n${digest}`;
}

/**
 * The names `(ref, digest)` the store has seen, with their outcome (resolved, resolving, or a
 * remembered "not lazy" answer: the negative cache). Bounded: the oldest idle names are forgotten.
 */
export class NameTable {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly maxEntries: number,
    /** Resolving or in-use names are kept beyond the bound. */
    private readonly busy: (e: Entry) => boolean,
    /** A name is forgotten: release what it holds. */
    private readonly onForget: (e: Entry) => void,
  ) {}

  get(ref: ImageRef | string, digest: string): Entry | undefined {
    return this.entries.get(nameKey(ref, digest));
  }

  /** The entry of a name, created (making room first) when new. */
  entry(ref: ImageRef, digest: Digest): Entry {
    const key = nameKey(ref, digest);
    let e = this.entries.get(key);
    if (!e) {
      if (this.entries.size >= this.maxEntries) this.shrink();
      e = { image: ref, ref: ref.toString(), digest, startedAt: 0 };
      this.entries.set(key, e);
    }
    return e;
  }

  delete(e: Entry): void {
    const key = nameKey(e.ref, e.digest);
    if (this.entries.get(key) === e) this.entries.delete(key);
  }

  values(): Iterable<Entry> {
    return this.entries.values();
  }

  get size(): number {
    return this.entries.size;
  }

  /** A remembered "not lazy" answer still in force, if any. */
  activeFailure(e: Entry, now = Date.now()): NotLazyError | undefined {
    return e.failure && e.failure.until > now ? e.failure.error : undefined;
  }

  /**
   * Forget the oldest names until there is room again. Busy names are moved to the back instead;
   * each is looked at once per call, so the cost is amortised over the insertions.
   */
  private shrink(): void {
    let budget = this.entries.size;
    for (const [k, e] of this.entries) {
      if (this.entries.size < this.maxEntries || budget-- <= 0) break;
      this.entries.delete(k);
      if (this.busy(e)) this.entries.set(k, e);
      else this.onForget(e);
    }
  }
}
