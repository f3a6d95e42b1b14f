import { describe, expect, it } from 'vitest';
import { LazyBlob } from '../../src/store/blob-source.js';
import { gate } from '../helpers/promises.js';

const bytes = Buffer.from(Array.from({ length: 100 }, (_, i) => i));
const answerAt = (offset: number, length: number) => Promise.resolve(bytes.subarray(offset, offset + length));

/** A LazyBlob over `bytes` whose registry reads go through `read` (and are recorded in `reads`). */
function blobOver(read: (offset: number, length: number, n: number) => Promise<Buffer> = answerAt) {
  const reads: Array<[number, number]> = [];
  let opens = 0;
  const blob = new LazyBlob(
    bytes.length,
    () => {
      opens++;
      return Promise.resolve({
        size: bytes.length,
        read: (offset: number, length: number) => {
          reads.push([offset, length]);
          return read(offset, length, reads.length);
        },
      });
    },
    {},
  );
  return { blob, reads, opens: () => opens };
}

describe('LazyBlob held tail', () => {
  it('answers reads of the held tail without the registry until the tail is dropped', async () => {
    const { blob, reads, opens } = blobOver();
    blob.holdTail(60, Buffer.from(bytes.subarray(60)));
    expect(await blob.read(70, 10)).toEqual(bytes.subarray(70, 80));
    expect(opens()).toBe(0);
    // a range across the tail's start: only the part before it goes to the registry
    const [across] = await blob.readRanges([{ offset: 50, length: 20 }], {});
    expect(across).toEqual(bytes.subarray(50, 70));
    expect(reads).toEqual([[50, 10]]);
    blob.dropTail();
    expect(await blob.read(70, 10)).toEqual(bytes.subarray(70, 80));
    expect(reads).toEqual([
      [50, 10],
      [70, 10],
    ]);
  });

  it('a read across the tail still gets its bytes when the tail is dropped while the registry answers', async () => {
    const registry = gate();
    const { blob } = blobOver(async (offset, length) => {
      await registry.wait;
      return await answerAt(offset, length);
    });
    blob.holdTail(60, Buffer.from(bytes.subarray(60)));
    const pending = blob.readRanges([{ offset: 50, length: 20 }], {});
    await new Promise((r) => setImmediate(r));
    blob.dropTail();
    registry.open();
    const [got] = await pending;
    expect(got).toEqual(bytes.subarray(50, 70));
  });

  it('a tail prefetched ahead answers the reads inside it once it lands, and reads meanwhile wait for it', async () => {
    const registry = gate();
    const { blob, reads } = blobOver(async (offset, length) => {
      await registry.wait;
      return await answerAt(offset, length);
    });
    blob.prefetchTail(40);
    const during = blob.read(90, 10);
    const ranges = blob.readRanges([{ offset: 60, length: 5 }], {});
    registry.open();
    expect(await during).toEqual(bytes.subarray(90, 100));
    expect(await ranges).toEqual([bytes.subarray(60, 65)]);
    expect(await blob.read(40, 60)).toEqual(bytes.subarray(40, 100));
    expect(reads).toEqual([[40, 60]]);
    // before the tail: the registry
    expect(await blob.read(10, 5)).toEqual(bytes.subarray(10, 15));
    expect(reads).toEqual([
      [40, 60],
      [10, 5],
    ]);
  });

  it('a prefetch that fails is forgotten: the read fetches its bytes itself', async () => {
    // the first read (the prefetch) breaks like a reset connection
    const { blob, reads } = blobOver((offset, length, n) =>
      n === 1 ? Promise.reject(new Error('connection reset')) : answerAt(offset, length),
    );
    blob.prefetchTail(50);
    expect(await blob.read(80, 10)).toEqual(bytes.subarray(80, 90));
    expect(reads).toEqual([
      [50, 50],
      [80, 10],
    ]);
  });
});
