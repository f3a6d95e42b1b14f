import { describe, expect, it } from 'vitest';
import { openLayer } from '../../src/format/open-layer.js';
import { estimateTarSize } from '../../src/format/tar-size.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildTestLayer, decompressBlob, edgeCaseTar, makeTar } from '../helpers/store.js';

describe('TOC-based uncompressed size estimate (OLD info diff-size without annotation)', () => {
  it('is close to the real decompressed size of a zstd:chunked layer', async () => {
    const long = 'd/' + 'n'.repeat(150);
    for (const tar of [
      await edgeCaseTar(),
      await makeTar([
        { name: 'd/', type: 'directory' },
        { name: long, content: 'long name' },
        { name: 'd/f', content: Buffer.alloc(10_000, 1) },
        { name: 'd/l', type: 'symlink', linkname: 'f' },
      ]),
    ]) {
      const l = await buildTestLayer(tar, 'zstd:chunked');
      const index = await openLayer(new BufferRangeReader(l.blob), {});
      const actual = (await decompressBlob(l.blob, true)).length;
      const est = estimateTarSize(index);
      expect(Math.abs(est - actual) / actual).toBeLessThan(0.01);
    }
  });
});
