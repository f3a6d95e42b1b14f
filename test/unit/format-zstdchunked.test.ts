/**
 * Current containers/storage zstd:chunked flavour (64-byte GNUlInUx footer, tar-split frame,
 * `chunkType: "zeros"`), on a blob built here frame by frame with zstd-napi.
 */
import { describe, expect, test } from 'vitest';
import { decompress as zstdDecompress } from 'zstd-napi';
import { lookupPath } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { isStoreError, StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildZstdChunked, skippableFrame, tarPadding, ustarHeader } from '../helpers/format-builders.js';
import { CountingReader, readTar, sha256 } from '../helpers/format-fixtures.js';

const HELLO = Buffer.from('hello world\n');
const C0 = Buffer.alloc(3000, 'A');
const C1 = Buffer.alloc(2048);
const C2 = Buffer.from('xyz'.repeat(100));
const BIG = Buffer.concat([C0, C1, C2]);
const MTIME = '2021-05-06T07:08:09Z';

interface Variant {
  zerosDigest?: string;
  markC2AsZeros?: boolean;
  bigEndOffset?: (offsets: number[]) => number;
}

function build(v: Variant = {}, opts: Parameters<typeof buildZstdChunked>[2] = {}) {
  const segments = [
    Buffer.concat([
      ustarHeader({ name: 'd/', type: '5', mode: 0o755 }),
      ustarHeader({ name: 'd/a.txt', size: HELLO.length }),
    ]),
    HELLO,
    Buffer.concat([tarPadding(HELLO.length), ustarHeader({ name: 'd/big', size: BIG.length, mode: 0o600 })]),
    C0,
    C1,
    C2,
    Buffer.concat([
      tarPadding(BIG.length),
      ustarHeader({ name: 'd/link', type: '2', linkname: 'a.txt', mode: 0o777 }),
      ustarHeader({ name: 'd/hard', type: '1', linkname: 'd/a.txt' }),
      ustarHeader({ name: 'd/empty' }),
      Buffer.alloc(1024),
    ]),
  ];
  return buildZstdChunked(
    segments,
    (off) => ({
      version: 1,
      entries: [
        { type: 'dir', name: 'd/', mode: 0o40755, modtime: MTIME, accesstime: MTIME },
        {
          type: 'reg',
          name: 'd/a.txt',
          mode: 0o100644,
          size: HELLO.length,
          modtime: MTIME,
          digest: sha256(HELLO),
          offset: off[1],
          endOffset: off[2],
        },
        {
          type: 'reg',
          name: 'd/big',
          mode: 0o100600,
          size: BIG.length,
          digest: sha256(BIG),
          offset: off[3],
          endOffset: v.bigEndOffset ? v.bigEndOffset(off) : off[6],
          chunkSize: C0.length,
          chunkDigest: sha256(C0),
        },
        {
          type: 'chunk',
          name: 'd/big',
          offset: off[4],
          chunkSize: C1.length,
          chunkOffset: C0.length,
          chunkDigest: v.zerosDigest ?? sha256(C1),
          chunkType: 'zeros',
        },
        {
          type: 'chunk',
          name: 'd/big',
          offset: off[5],
          chunkSize: C2.length,
          chunkOffset: C0.length + C1.length,
          chunkDigest: sha256(C2),
          ...(v.markC2AsZeros ? { chunkType: 'zeros' } : {}),
        },
        { type: 'symlink', name: 'd/link', linkName: 'a.txt', mode: 0o120777 },
        { type: 'hardlink', name: 'd/hard', linkName: 'd/a.txt', mode: 0o100644 },
        { type: 'reg', name: 'd/empty', mode: 0o100644 },
      ],
      tarSplitDigest: 'sha256:' + '1'.repeat(64),
    }),
    opts,
  );
}

async function code(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreError);
  return (err as StoreError).code;
}

describe('zstd:chunked (current containers/storage flavour)', () => {
  test('the test blob is a valid zstd stream of a tar (zstd-napi + tar-stream agree)', async () => {
    const { blob } = build();
    const members = await readTar(zstdDecompress(blob));
    const member = (name: string) => members.find((m) => m.name === name);
    expect(sha256(member('d/big')!.data)).toBe(sha256(BIG));
    expect(member('d/hard')).toMatchObject({ type: 'link', linkname: 'd/a.txt' });
    expect(member('d/a.txt')!.data.toString()).toBe('hello world\n');
  });

  test('footer, digests and offsets', async () => {
    const b = build();
    const index = await openLayer(new BufferRangeReader(b.blob));
    expect(index).toMatchObject({
      format: 'zstd:chunked',
      compression: 'zstd',
      blobSize: b.blob.length,
      tocOffset: b.manifestOffset,
      dataEnd: b.manifestOffset - 8,
      tocDigest: sha256(b.compressedManifest),
      manifestChecksum: sha256(b.compressedManifest),
      tocJsonDigest: sha256(b.json),
      prefetch: { kind: 'default' },
    });
  });

  test('tree: type bits masked, hardlink shared, zeros chunk without compressed data', async () => {
    const b = build();
    const index = await openLayer(new BufferRangeReader(b.blob));
    const a = lookupPath(index, 'd/a.txt')!;
    expect(a).toMatchObject({ mode: 0o644, size: 12, nlink: 2, mtime: Date.UTC(2021, 4, 6, 7, 8, 9) / 1000 });
    expect(lookupPath(index, 'd/hard')).toBe(a);
    expect(a.chunks).toMatchObject([
      {
        fileOffset: 0,
        size: 12,
        compressedOffset: b.offsets[1],
        compressedEnd: b.offsets[2],
        innerOffset: 0,
        digest: sha256(HELLO),
      },
    ]);
    expect(lookupPath(index, 'd')).toMatchObject({ type: 'dir', mode: 0o755 });
    expect(lookupPath(index, 'd/link')).toMatchObject({ type: 'symlink', mode: 0o777, linkName: 'a.txt' });
    const big = lookupPath(index, 'd/big')!;
    expect(big.mode).toBe(0o600);
    expect(
      big.chunks.map((c) => [c.fileOffset, c.size, c.compressedOffset, c.compressedEnd, c.zeros ?? false]),
    ).toEqual([
      [0, 3000, b.offsets[3], b.offsets[4], false],
      [3000, 2048, b.offsets[4], b.offsets[4], true],
      [5048, 300, b.offsets[5], b.offsets[6], false],
    ]);
  });

  test('reads: whole file, across chunk boundaries, inside the zeros chunk', async () => {
    const b = build();
    const reader = new BufferRangeReader(b.blob);
    const index = await openLayer(reader);
    const big = lookupPath(index, 'd/big')!;
    expect((await readFileRange(reader, index, big, 0, BIG.length)).equals(BIG)).toBe(true);
    for (const [off, len] of [
      [2990, 20],
      [3500, 100],
      [5040, 20],
      [0, 1],
      [5347, 10],
    ] as const) {
      expect((await readFileRange(reader, index, big, off, len)).equals(BIG.subarray(off, off + len))).toBe(
        true,
      );
    }
    expect((await readFileRange(reader, index, lookupPath(index, 'd/hard')!, 0, 100)).equals(HELLO)).toBe(
      true,
    );
  });

  test('a data chunk falsely marked zeros fails verification instead of returning zeros', async () => {
    const b = build({ markC2AsZeros: true });
    const reader = new BufferRangeReader(b.blob);
    const index = await openLayer(reader);
    const big = lookupPath(index, 'd/big')!;
    const err = await readFileRange(reader, index, big, 5048, 10).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_DIGEST_MISMATCH')).toBe(true);
    expect((await readFileRange(reader, index, big, 0, 10)).equals(C0.subarray(0, 10))).toBe(true);
  });

  test('expectedTocDigest: manifest-checksum or JSON digest accepted, anything else refused', async () => {
    const b = build();
    const reader = new BufferRangeReader(b.blob);
    await expect(
      openLayer(reader, { expectedTocDigest: sha256(b.compressedManifest) }),
    ).resolves.toBeDefined();
    await expect(openLayer(reader, { expectedTocDigest: sha256(b.json) })).resolves.toBeDefined();
    expect(await code(openLayer(reader, { expectedTocDigest: sha256('other') }))).toBe(
      'E_TOC_DIGEST_MISMATCH',
    );
  });

  test('manifest-position hint: a single read covers manifest, tar-split and footer', async () => {
    const b = build();
    const reader = new CountingReader(b.blob);
    await openLayer(reader, { tocOffsetHint: b.manifestOffset });
    expect(reader.requests).toEqual([[b.manifestOffset - 8, b.blob.length - b.manifestOffset + 8]]);
    const plain = new CountingReader(b.blob);
    await openLayer(plain, { tailGuessBytes: 72 });
    expect(plain.requests).toEqual([
      [b.blob.length - 72, 72],
      [b.manifestOffset - 8, b.compressedManifest.length + 8],
    ]);
    // without a hint the first read takes the end of a small blob whole: footer and manifest at once
    const guessed = new CountingReader(b.blob);
    await openLayer(guessed);
    expect(guessed.requests).toEqual([[0, b.blob.length]]);
  });

  test('strict footer: manifest type, magic, ranges, skippable framing', async () => {
    expect(await code(openLayer(new BufferRangeReader(build({}, { footerType: 2 }).blob)))).toBe(
      'E_BAD_FOOTER',
    );
    // the early magic on a 64-byte payload is not a valid 40-byte footer either
    expect(await code(openLayer(new BufferRangeReader(build({}, { magic: 'GnUlInUx' }).blob)))).toBe(
      'E_BAD_FOOTER',
    );
    const b = build();
    const patch = (at: number, value: bigint): Buffer => {
      const copy = Buffer.from(b.blob);
      copy.writeBigUInt64LE(value, copy.length - 64 + at);
      return copy;
    };
    expect(await code(openLayer(new BufferRangeReader(patch(0, BigInt(b.blob.length)))))).toBe(
      'E_BAD_FOOTER',
    );
    expect(await code(openLayer(new BufferRangeReader(patch(0, 2n ** 63n))))).toBe('E_BAD_FOOTER');
    expect(
      await code(openLayer(new BufferRangeReader(patch(8, BigInt(b.compressedManifest.length + 1))))),
    ).toBe('E_BAD_TOC');
    expect(await code(openLayer(new BufferRangeReader(patch(16, BigInt(b.json.length - 1)))))).toBe(
      'E_BAD_TOC',
    );
    expect(await code(openLayer(new BufferRangeReader(patch(16, BigInt(b.json.length + 1)))))).toBe(
      'E_BAD_TOC',
    );
    expect(await code(openLayer(new BufferRangeReader(patch(32, BigInt(b.manifestOffset)))))).toBe(
      'E_BAD_FOOTER',
    );
    const badFrame = Buffer.from(b.blob);
    badFrame.writeUInt32LE(0x184d2a50, badFrame.length - 72 + 0);
    badFrame.writeUInt32LE(63, badFrame.length - 72 + 4);
    expect(await code(openLayer(new BufferRangeReader(badFrame)))).toBe('E_BAD_FOOTER');
  });

  test('TOC size cap applies to the announced manifest sizes', async () => {
    const b = build();
    expect(await code(openLayer(new BufferRangeReader(b.blob), { maxTocBytes: b.json.length - 1 }))).toBe(
      'E_TOC_TOO_LARGE',
    );
  });

  test('a file span ending beyond the data region is refused', async () => {
    const b = build({ bigEndOffset: (off) => off[7]! + 1 });
    expect(await code(openLayer(new BufferRangeReader(b.blob)))).toBe('E_BAD_TOC');
  });

  test('garbage instead of a manifest frame is a typed error', async () => {
    const b = build();
    const copy = Buffer.from(b.blob);
    copy.fill(0x41, b.manifestOffset, b.manifestOffset + b.compressedManifest.length);
    expect(await code(openLayer(new BufferRangeReader(copy)))).toBe('E_BAD_TOC');
    // skippable frame helper sanity: payload length is announced in the header
    expect(skippableFrame(Buffer.alloc(3)).readUInt32LE(4)).toBe(3);
  });
});
