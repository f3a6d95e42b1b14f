/**
 * The seam between the fetch engine and a local store of compressed bytes (restart-resume, the
 * DiffID check from local bytes). The engine never knows how bytes are kept; it only:
 *
 * - asks `localBytes.covered(offset, length)` before every network fetch, and reads covered
 *   spans with `localBytes.read` (a failed local read falls back to the network);
 * - hands EVERY compressed byte it receives from the network, exactly once, to
 *   `onCompressedBytes(offset, data)` (one call per fetched span, after the source returned it,
 *   before any chunk decoded from it is delivered).
 *
 * A fetch asked with `bypassCache` (the DiffID re-check) skips `localBytes` and goes to the
 * origin; what it receives still goes to `onCompressedBytes` (it may overwrite a bad local copy).
 */
export interface LocalCompressedBytes {
  /** True when every byte of [offset, offset+length) is held locally. Synchronous and cheap. */
  covered(offset: number, length: number): boolean;
  /**
   * Optional: the held parts of [offset, offset+length), sorted and disjoint, so a span partly
   * held is fetched only for the rest. Without it, a span is local only when `covered` whole.
   */
  held?(offset: number, length: number): Array<{ offset: number; length: number }>;
  /** Exactly `length` bytes, or a rejection (the engine then fetches them from the network). */
  read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer>;
}

/**
 * What a layer is given to keep its compressed bytes locally (src/store/local-blob-binding.ts): the
 * bytes it holds, the sink for every byte received, and the two moments the layer tells it about.
 */
export interface LocalCompressedStore extends LocalCompressedBytes {
  readonly onCompressedBytes: CompressedBytesSink;
  /**
   * Resolves once the bytes received so far are stored to within a bound (a crash loses at most
   * about that much). The background pass waits on it between units, so a slow disk slows the
   * background fetch instead of piling received bytes up in memory.
   */
  settle?(): Promise<void>;
  /** The layer is fully verified (now or from persisted state): the local bytes may go. */
  discard?(): Promise<void>;
  /** A re-check from the origin is about to run: the local bytes must not be trusted. */
  forget?(): Promise<void>;
}

/**
 * Sink for compressed bytes received from the network. Must not throw; must not modify `data`.
 * A sink that still reads `data` after returning (a file write in flight) returns a promise that
 * settles once it no longer does: the engine may release the buffer after that
 * (util/release-buffer.ts). Returning nothing says it kept no reference.
 */
export type CompressedBytesSink = (offset: number, data: Buffer) => Promise<unknown> | void;
