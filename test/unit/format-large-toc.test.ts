/**
 * Bigger real TOCs (samples/small: ~52 MB layers, 2-3 MB of TOC JSON) opened from the blob
 * tails kept in the samples: digests equal the annotations and the tree has every TOC name.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { describe, expect, test } from 'vitest';
import type { TreeNode } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { cleanEntryName } from '../../src/format/toc-names.js';
import { StoreError } from '../../src/util/errors.js';
import type { RangeReader } from '../../src/util/range-reader.js';
import { CountingReader, SHARED } from '../helpers/format-fixtures.js';

/**
 * A blob of `size` bytes of which only [tailStart, size) is known. For zstd:chunked tails that
 * start at the manifest, the 8-byte skippable frame header in front of it is re-created from
 * the manifest-position annotation (magic 0x184D2A50 + LE32 compressed length).
 */
class TailReader implements RangeReader {
  readonly requests: Array<[number, number]> = [];
  constructor(
    readonly size: number,
    private readonly tailStart: number,
    private readonly tail: Buffer,
  ) {}
  async read(offset: number, length: number): Promise<Buffer> {
    this.requests.push([offset, length]);
    if (offset < this.tailStart)
      throw new StoreError('E_IO', `bytes before ${this.tailStart} not in the sample`);
    return this.tail.subarray(offset - this.tailStart, offset - this.tailStart + length);
  }
}

const SMALL = join(SHARED, 'samples/small');

function names(node: TreeNode, prefix = '', out = new Set<string>()): Set<string> {
  for (const [name, child] of node.children ?? []) {
    const path = prefix === '' ? name : `${prefix}/${name}`;
    out.add(path);
    if (child.type === 'dir') names(child, path, out);
  }
  return out;
}

describe('samples/small TOCs', () => {
  for (const dir of ['estargz', 'esgz-opt', 'zstd-chunked', 'ctr-zstdchunked']) {
    test(`${dir}: digests, tree completeness, reads only the tail`, async () => {
      const d = join(SMALL, dir);
      const files = await readdir(d);
      const tailFile = files.find((f) => f.includes('.tail-from-'))!;
      const tailStart = Number(tailFile.split('.tail-from-')[1]);
      const manifest = JSON.parse(await readFile(join(d, 'manifest.json'), 'utf8')) as {
        layers: Array<{ size: number; annotations: Record<string, string> }>;
      };
      const layer = manifest.layers[0]!;
      const ann = layer.annotations;
      let tail = await readFile(join(d, tailFile));
      let start = tailStart;
      const position = ann['io.containers.zstd-chunked.manifest-position'];
      if (position !== undefined) {
        const [offset, length] = position.split(':').map(Number) as [number, number];
        expect(offset).toBe(tailStart);
        const header = Buffer.alloc(8);
        header.writeUInt32LE(0x184d2a50, 0);
        header.writeUInt32LE(length, 4);
        tail = Buffer.concat([header, tail]);
        start -= 8;
      }
      expect(start + tail.length).toBe(layer.size);
      const reader = new TailReader(layer.size, start, tail);
      // zstd: the manifest-position hint makes it one request; eStargz (no hint source): footer + TOC
      const index = await openLayer(reader, position !== undefined ? { tocOffsetHint: tailStart } : {});
      expect(reader.requests.length).toBe(position !== undefined ? 1 : 2);
      const checksum = ann['io.containers.zstd-chunked.manifest-checksum'];
      const tocDigest = ann['containerd.io/snapshot/stargz/toc.digest'];
      if (checksum !== undefined) expect(index.tocDigest).toBe(checksum);
      if (tocDigest !== undefined) expect(index.tocJsonDigest).toBe(tocDigest);
      if (checksum === undefined) expect(index.tocDigest).toBe(tocDigest);

      // every name in the decoded TOC is in the tree (plus implicit parents only)
      const tocFile = (await readdir(join(d, 'toc')))[0]!;
      const toc = JSON.parse(gunzipSync(await readFile(join(d, 'toc', tocFile))).toString()) as {
        entries: Array<{ name: string; type: string }>;
      };
      const tree = names(index.root);
      const tocNames = new Set(
        toc.entries.filter((e) => e.type !== 'chunk').map((e) => cleanEntryName(e.name)),
      );
      tocNames.delete('');
      for (const n of tocNames) expect(tree.has(n), n).toBe(true);
      for (const n of tree) {
        if (!tocNames.has(n)) expect(index.nodes.find((x) => x?.path === n)?.type, n).toBe('dir');
      }
      expect(tree.size).toBeGreaterThan(1000);
    });
  }

  test('without a hint the reads are the footer and the TOC only', async () => {
    const d = join(SMALL, 'estargz');
    const tailFile = (await readdir(d)).find((f) => f.includes('.tail-from-'))!;
    const tail = await readFile(join(d, tailFile));
    const reader = new CountingReader(tail);
    // the tail alone is not a blob (offsets are absolute), so this must fail typed, after 2 reads at most
    const err = await openLayer(reader).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect(reader.requests.length).toBeLessThanOrEqual(2);
  });
});
