/**
 * LocalBlobBinding holds the bytes received before the layer's local copy opens and hands them over
 * once it does; the sink's promise settles only when the local copy no longer reads them (the span
 * fetcher gives the buffer back after that), or at once when the copy cannot be opened.
 */
import { describe, expect, it } from 'vitest';
import type { BlobStore } from '../../src/cache/blob-store.js';
import type { LocalBlob } from '../../src/cache/local-blob.js';
import { LocalBlobBinding } from '../../src/store/local-blob-binding.js';
import { silentLogger } from '../../src/util/logger.js';

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const turns = async (n = 5): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
};

describe('LocalBlobBinding', () => {
  it('bytes received before the local copy opens are written once it does; the sink settles after the write', async () => {
    const opening = deferred<LocalBlob>();
    const write = deferred<void>();
    const got: Array<[number, Buffer]> = [];
    const blob = {
      onCompressedBytes: (offset: number, data: Buffer) => {
        got.push([offset, data]);
        return write.promise;
      },
    } as unknown as LocalBlob;
    const store = { openBlob: () => opening.promise } as unknown as BlobStore;
    const binding = new LocalBlobBinding(store, 'sha256:' + 'ab'.repeat(32), 100, silentLogger);
    const data = Buffer.from('early bytes');
    let settled = false;
    void binding.onCompressedBytes(10, data)?.then(() => (settled = true));
    await turns();
    expect(settled).toBe(false); // held by the binding: not open yet
    opening.resolve(blob);
    await turns();
    expect(got).toEqual([[10, data]]); // the same buffer, handed over
    expect(settled).toBe(false); // the local copy's write still reads it
    write.resolve();
    await turns();
    expect(settled).toBe(true);
  });

  it('a local copy that cannot be opened lets go of the early bytes at once', async () => {
    const opening = deferred<LocalBlob>();
    const store = { openBlob: () => opening.promise } as unknown as BlobStore;
    const binding = new LocalBlobBinding(store, 'sha256:' + 'cd'.repeat(32), 100, silentLogger);
    let settled = false;
    void binding.onCompressedBytes(0, Buffer.from('x'))?.then(() => (settled = true));
    opening.reject(new Error('ENOSPC'));
    await turns();
    expect(settled).toBe(true);
    expect(binding.onCompressedBytes(1, Buffer.from('y'))).toBeUndefined(); // nothing kept
  });
});
