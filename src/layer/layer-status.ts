import { digestKey } from '../format/index-chunk.js';
import type { Chunk } from '../format/model.js';
import { asStoreError, type StoreError, type ErrorContext } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

/**
 * What a LazyLayer knows about its own progress and health, shared by its read path, its
 * prefetch and its background passes (each in its own module): chunks verified, bytes fetched,
 * the DiffID verdict, the last error. Plain fields; the owner reports them through state().
 */
export class LayerStatus {
  /** Digests of the verified chunks, as digestKey() gives them. */
  private readonly verified = new Set<string>();
  verifiedBytes = 0;
  bytesFetched = 0;
  prefetchDone = false;
  backgroundDone = false;
  private fully = false;
  /** Length of the decompressed layer, once its DiffID matched. */
  uncompressedSize: number | undefined;
  /** Set when the layer failed its DiffID check: every read fails with it (E_LAYER_BAD). */
  badError: StoreError | undefined;
  lastError: string | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly context: ErrorContext,
  ) {}

  /** The layer's DiffID matched: every chunk of it is verified. */
  get fullyVerified(): boolean {
    return this.fully;
  }

  /**
   * Every chunk is verified from now on: the per-chunk set goes (about 130 bytes of heap per chunk,
   * ~1.2 MB for the lab image's 9 layers mounted), wasVerified() answers true for all of them.
   */
  markFullyVerified(): void {
    this.fully = true;
    this.verified.clear();
  }

  markVerified(c: Chunk): void {
    // zeros chunks need no data, so they are not part of chunksTotal either
    if (c.zeros || this.fully) return;
    const key = digestKey(c);
    if (this.verified.has(key)) return;
    this.verified.add(key);
    this.verifiedBytes += c.size;
  }

  wasVerified(c: Chunk): boolean {
    return this.fully || this.verified.has(digestKey(c));
  }

  /** Distinct chunks verified so far (not counted once the layer is fully verified: see state()). */
  get chunksVerified(): number {
    return this.verified.size;
  }

  /** Remember an error for state() and log it. Never throws: it is the last line of defence. */
  recordError(err: unknown, what: string): void {
    const e = asStoreError(err, 'E_IO', this.context);
    this.lastError = `${e.code}: ${e.message}`;
    try {
      this.logger.warn({ err: e }, what);
    } catch {
      // a failing logger must not turn a recorded error into an unhandled one
    }
  }
}
