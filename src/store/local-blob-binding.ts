import type { BlobStore } from '../cache/blob-store.js';
import type { LocalBlob } from '../cache/local-blob.js';
import type { LocalCompressedStore } from '../layer/compressed-store.js';
import type { PassingBytesSink } from '../registry/whole-blob-stream.js';
import { asStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

/**
 * Binds one layer's fetch engine to the local copy of its compressed blob (src/cache/blob-store.ts).
 *
 * Layers are created synchronously while opening the local copy is asynchronous (it reads the
 * coverage record), so until it is open nothing counts as held locally and bytes received in the
 * meantime are handed over as soon as it opens: no received byte is dropped, so none is fetched
 * twice. When the local copy cannot be opened (disk full, permissions), the layer simply works
 * without it, as with no store at all; the reason is logged once.
 */
export class LocalBlobBinding implements LocalCompressedStore {
  private blob: LocalBlob | undefined;
  private failed = false;
  /** Bytes received before the local copy opened, each with what settles the sink's promise. */
  private early: Array<{ offset: number; data: Buffer; done: (p: Promise<void> | undefined) => void }> = [];
  private readonly opened: Promise<LocalBlob | undefined>;

  constructor(
    private readonly store: BlobStore,
    readonly digest: string,
    size: number,
    logger: Logger,
  ) {
    this.opened = store.openBlob(digest, size).then(
      (blob) => {
        this.blob = blob;
        for (const e of this.early) e.done(blob.onCompressedBytes(e.offset, e.data));
        this.early = [];
        return blob;
      },
      (err: unknown) => {
        this.failed = true;
        for (const e of this.early) e.done(undefined);
        this.early = [];
        logger.warn(
          { err: asStoreError(err, 'E_IO'), digest },
          'local blob copy unavailable; fetching without it',
        );
        return undefined;
      },
    );
  }

  covered(offset: number, length: number): boolean {
    return this.blob?.covered(offset, length) ?? false;
  }

  held(offset: number, length: number): Array<{ offset: number; length: number }> {
    return this.blob?.held(offset, length) ?? [];
  }

  read(offset: number, length: number): Promise<Buffer> {
    if (this.blob === undefined) return Promise.reject(new Error('local blob copy not open'));
    return this.blob.read(offset, length);
  }

  /** The engine's sink: every compressed byte received from the network. */
  readonly onCompressedBytes = (offset: number, data: Buffer): Promise<void> | undefined => {
    if (this.blob !== undefined) return this.blob.onCompressedBytes(offset, data);
    if (this.failed) return undefined;
    // held until the local copy opens and has written it (CompressedBytesSink)
    return new Promise<void>((resolve) => {
      this.early.push({ offset, data, done: (p) => void (p ?? Promise.resolve()).then(resolve) });
    });
  };

  async settle(): Promise<void> {
    await (await this.opened)?.settle();
  }

  /** The layer is fully verified: its chunks are cached, the compressed copy is no longer needed. */
  async discard(): Promise<void> {
    await this.opened;
    await this.store.remove(this.digest);
  }

  /** Before a re-check from the origin: forget the local bytes so fresh ones replace them. */
  async forget(): Promise<void> {
    const blob = await this.opened;
    await blob?.invalidate(0, blob.size);
  }
}

/**
 * Where a whole-blob stream from a host that ignores Range (a cold pull-through cache) leaves the
 * bytes nobody was waiting for: the open local copy of that blob, so later reads find them there
 * instead of streaming the blob again. `store()` is read at each call: the registry client is
 * built before the blob store opens. Bytes of a blob no layer has open are dropped.
 */
export function passingBytesSink(store: () => BlobStore | undefined): PassingBytesSink {
  return {
    onPassingBytes(digest, offset, buf) {
      // the stream reuses its buffer after the call: keep a copy
      store()?.opened(digest)?.onCompressedBytes(offset, Buffer.from(buf));
    },
    async readPassed(digest, offset, length) {
      const blob = store()?.opened(digest);
      if (blob === undefined || !blob.covered(offset, length)) return undefined;
      return await blob.read(offset, length);
    },
  };
}
