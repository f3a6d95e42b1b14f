/**
 * Issue 14: a chunk decodes exactly its own gzip member / zstd frame. Bytes after it in the
 * fetched span belong to other files; a broken neighbour must never fail a good file.
 */
import { crc32, gzipSync } from 'node:zlib';
import { describe, expect, test } from 'vitest';
import { compress as zstdCompress } from 'zstd-napi';
import { decodeChunk, decodeChunks } from '../../src/format/codec.js';
import { lookupPath, type Chunk } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildEStargz } from '../helpers/format-builders.js';
import { failure, sha256 } from '../helpers/format-fixtures.js';

const GOOD = Buffer.from('good file contents\n'.repeat(40));
const NEIGHBOUR = Buffer.from('neighbour bytes '.repeat(30));

function chunkOf(data: Buffer, spanLength: number, innerOffset = 0): Chunk {
  return {
    fileOffset: 0,
    size: data.length,
    compressedOffset: 0,
    compressedEnd: spanLength,
    innerOffset,
    digest: sha256(data),
  };
}

/** Tails that may follow a member in a span: starts of broken members, garbage, a valid member. */
function tails(valid: Buffer): Array<[string, Buffer]> {
  return [
    ['3 bytes of the next member', valid.subarray(0, 3)],
    ['the next member cut in its header', valid.subarray(0, 7)],
    ['the next member cut in its data', valid.subarray(0, valid.length - 12)],
    ['garbage', Buffer.from('this is not compressed data at all')],
    ['a flipped next member', Buffer.from(valid.map((b, i) => (i > 12 ? b ^ 0x55 : b)))],
    ['a whole valid member', valid],
    ['nothing', Buffer.alloc(0)],
  ];
}

describe('decodeChunk stops at the end of its member / frame', () => {
  for (const [codec, compress] of [
    ['gzip', (b: Buffer) => gzipSync(b)],
    ['zstd', (b: Buffer) => zstdCompress(b)],
  ] as const) {
    for (const [what, tail] of tails(compress(NEIGHBOUR))) {
      test(`${codec}: followed by ${what}`, async () => {
        const span = Buffer.concat([compress(GOOD), tail]);
        const out = await decodeChunk(codec === 'gzip' ? 'gzip' : 'zstd', span, chunkOf(GOOD, span.length));
        expect(out.equals(GOOD)).toBe(true);
      });
    }
  }

  test('gzip: several chunks sharing one member (innerOffset), followed by a broken member', async () => {
    const a = Buffer.from('aaaa'.repeat(10));
    const b = Buffer.from('bbbb'.repeat(10));
    const span = Buffer.concat([gzipSync(Buffer.concat([a, b])), gzipSync(NEIGHBOUR).subarray(0, 3)]);
    const out = await decodeChunks('gzip', span, [
      chunkOf(a, span.length),
      chunkOf(b, span.length, a.length),
    ]);
    expect((out[0] as Buffer).equals(a)).toBe(true);
    expect((out[1] as Buffer).equals(b)).toBe(true);
  });

  test('gzip: a member with optional header fields (FEXTRA, FNAME, FCOMMENT, FHCRC)', async () => {
    const plain = gzipSync(GOOD);
    const extra = Buffer.from([4, 0, 1, 2, 3, 4]);
    const header = Buffer.from(plain.subarray(0, 10));
    header[3] = 4 | 8 | 16 | 2;
    const fields = Buffer.concat([header, extra, Buffer.from('name\0comment\0', 'latin1')]);
    const hcrc = Buffer.alloc(2);
    hcrc.writeUInt16LE(crc32(fields) & 0xffff, 0);
    const member = Buffer.concat([fields, hcrc, plain.subarray(10)]);
    const span = Buffer.concat([member, gzipSync(NEIGHBOUR).subarray(0, 3)]);
    expect((await decodeChunk('gzip', span, chunkOf(GOOD, span.length))).equals(GOOD)).toBe(true);
  });

  test('gzip: a span that is not a member at all is a typed E_DECOMPRESS', async () => {
    for (const span of [
      Buffer.from('garbage garbage'),
      Buffer.from([0x1f, 0x8b, 8]),
      Buffer.from([0x1f, 0x8b, 9, 0, 0, 0, 0, 0, 0, 0, 0]),
    ]) {
      const err = await failure(decodeChunk('gzip', span, chunkOf(GOOD, span.length)));
      expect(err).toBeInstanceOf(StoreError);
      expect(err.code).toBe('E_DECOMPRESS');
    }
  });
});

describe('eStargz layer: a TOC offset 3 bytes into a member breaks only that file', () => {
  test('layer read of the valid neighbour succeeds; the broken file fails typed', async () => {
    const { blob } = buildEStargz([GOOD, NEIGHBOUR], (off) => ({
      version: 1,
      entries: [
        {
          name: 'good.txt',
          type: 'reg',
          size: GOOD.length,
          offset: off[0],
          digest: sha256(GOOD),
          chunkDigest: sha256(GOOD),
        },
        // hostile: points 3 bytes into its member
        {
          name: 'bad.txt',
          type: 'reg',
          size: NEIGHBOUR.length,
          offset: off[1]! + 3,
          digest: sha256(NEIGHBOUR),
          chunkDigest: sha256(NEIGHBOUR),
        },
      ],
    }));
    const reader = new BufferRangeReader(blob);
    const index = await openLayer(reader);
    const good = lookupPath(index, 'good.txt')!;
    expect((await readFileRange(reader, index, good, 0, good.size)).equals(GOOD)).toBe(true);
    const err = await failure(readFileRange(reader, index, lookupPath(index, 'bad.txt')!, 0, 10));
    expect(err).toBeInstanceOf(StoreError);
    expect(['E_DECOMPRESS', 'E_TRUNCATED', 'E_DIGEST_MISMATCH']).toContain(err.code);
  });
});
