import { createHash, type Hash } from 'node:crypto';
import { once } from 'node:events';
import { finished } from 'node:stream/promises';
import { asStoreError } from '../../util/errors.js';

/** The output blob: counts bytes (compressed offsets), hashes them, honours backpressure. */
export class BlobSink {
  offset = 0;
  private readonly hash: Hash = createHash('sha256');
  private error: unknown;

  constructor(private readonly out: NodeJS.WritableStream) {
    out.on('error', (err: unknown) => {
      this.error ??= err;
    });
  }

  async write(buf: Buffer): Promise<void> {
    if (this.error !== undefined) throw asStoreError(this.error, 'E_IO');
    if (buf.length === 0) return;
    this.hash.update(buf);
    this.offset += buf.length;
    if (!this.out.write(buf)) {
      try {
        await once(this.out as unknown as NodeJS.EventEmitter, 'drain');
      } catch (err) {
        throw asStoreError(err, 'E_IO');
      }
    }
  }

  /** End the output and wait until it is flushed. */
  async end(): Promise<void> {
    if (this.error !== undefined) throw asStoreError(this.error, 'E_IO');
    this.out.end();
    try {
      await finished(this.out as unknown as NodeJS.WritableStream & NodeJS.EventEmitter);
    } catch (err) {
      throw asStoreError(err, 'E_IO');
    }
  }

  digest(): string {
    return 'sha256:' + this.hash.digest('hex');
  }
}

/**
 * Map `fn` over `src` with up to `concurrency` calls in flight, yielding results in input order
 * (compression of independent members/frames in parallel, written sequentially).
 */
export async function* mapOrdered<T, R>(
  src: AsyncIterable<T>,
  fn: (item: T) => Promise<R>,
  concurrency: number,
): AsyncGenerator<[T, R]> {
  const queue: { item: T; result: Promise<R> }[] = [];
  try {
    for await (const item of src) {
      const result = fn(item);
      result.catch(() => {}); // observed later, in order; avoid an unhandled-rejection warning
      queue.push({ item, result });
      if (queue.length >= concurrency) {
        const head = queue.shift()!;
        yield [head.item, await head.result];
      }
    }
    while (queue.length > 0) {
      const head = queue.shift()!;
      yield [head.item, await head.result];
    }
  } finally {
    for (const q of queue) q.result.catch(() => {});
  }
}
