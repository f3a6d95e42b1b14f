/**
 * Ground-truth vectors A (eStargz) and B (zstd:chunked, stargz flavour) from the upstream Go
 * estargz package: every fact in vectors/README.md and spec §9.2/§9.3 items 1-9.
 */
import { gunzipSync } from 'node:zlib';
import { describe, expect, test } from 'vitest';
import { decompress as zstdDecompress } from 'zstd-napi';
import { isStoreError, StoreError } from '../../src/util/errors.js';
import { lookupPath, type LayerIndex, type TreeNode } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { CountingReader, loadBlob, readTar, sha256, VECTOR_A, VECTOR_B } from '../helpers/format-fixtures.js';

const MTIME = Date.UTC(2020, 0, 2, 3, 4, 5) / 1000;
const A = {
  size: 1563,
  sha256: 'sha256:59c15cc76210c1e6c19cf7a0cc66939f34be750873747e20bc8f1576529b97cb',
  tocOffset: 675,
  tocDigest: 'sha256:eb0ed4f2b5a8333488f5b25c8441ac95d1232a96b9e6b034eae0341622392376',
  diffId: 'sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618',
  /** offset: uncompressed length of every gzip member */
  members: [
    [0, 2048],
    [211, 4],
    [244, 1020],
    [338, 1024],
    [442, 4],
    [475, 4],
    [508, 2552],
    [675, 4096],
    [1512, 0],
  ] as const,
};
const B = {
  size: 1495,
  sha256: 'sha256:f191aea79c3ab05aa4a47f5eda19dee861b73b6349229bdb0d712b454f69d9d8',
  tocJsonDigest: 'sha256:0a5d0b175bad3213eeb9a0d7731ac789af75a86469bf095ac0d44286aae9bc99',
  manifestChecksum: 'sha256:609868a8d0f0b24f3b473a3ac6f50f32a98ecf36d8e466dff527e2223b051131',
  position: [649, 798, 2437, 1],
  diffId: 'sha256:ee484253ce22b6ece91f77f3bd461abcd602337ea94aa6ba684270b5cb455524',
  tail48:
    '502a4d18280000008902000000000000' +
    '1e030000000000008509000000000000' +
    '0100000000000000476e556c496e5578',
};

async function open(path: string): Promise<{ buf: Buffer; index: LayerIndex; reader: BufferRangeReader }> {
  const { buf, reader } = await loadBlob(path);
  return { buf, reader, index: await openLayer(reader) };
}

function node(index: LayerIndex, path: string): TreeNode {
  const n = lookupPath(index, path);
  if (n === undefined) throw new Error(`missing ${path}`);
  return n;
}

/** Facts shared by A and B (same input tar). */
function commonTreeFacts(index: LayerIndex): void {
  const foo = node(index, 'foo');
  expect(foo).toMatchObject({ type: 'dir', mode: 0o755, nlink: 2, mtime: MTIME });
  const bar = node(index, 'foo/bar.txt');
  expect(bar).toMatchObject({
    type: 'reg',
    mode: 0o644,
    uid: 1000,
    gid: 1000,
    uname: 'user',
    gname: 'group',
    size: 6,
    mtime: MTIME,
    nlink: 2,
  });
  expect(bar.xattrs.get('user.k')?.toString()).toBe('v');
  // foo/hard => foo/bar.txt: one node under both names
  expect(node(index, 'foo/hard')).toBe(bar);
  expect(node(index, 'foo/big.bin')).toMatchObject({ type: 'reg', mode: 0o600, size: 10, nlink: 1 });
  expect(node(index, 'foo/link')).toMatchObject({ type: 'symlink', linkName: 'bar.txt', size: 0 });
  // whiteouts stay plain entries in the model
  expect(node(index, 'foo/.wh.gone')).toMatchObject({ type: 'reg', size: 0, chunks: [] });
  expect(node(index, 'empty')).toMatchObject({
    type: 'reg',
    size: 0,
    digest: 'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  });
  expect(index.root).toMatchObject({ id: 1, type: 'dir', path: '' });
  // ids: root = 1, then TOC order, index 0 unused, each node once
  expect(index.nodes[0]).toBeUndefined();
  index.nodes.forEach((n, i) => expect(n.id).toBe(i));
  expect(new Set(index.nodes.filter(Boolean)).size).toBe(index.nodes.length - 1);
}

async function everyRange(index: LayerIndex, reader: BufferRangeReader): Promise<void> {
  const big = node(index, 'foo/big.bin');
  const content = '0123456789';
  for (let offset = 0; offset <= 10; offset++) {
    for (let length = 0; length <= 11 - offset; length++) {
      const got = await readFileRange(reader, index, big, offset, length);
      expect(got.toString(), `offset ${offset} length ${length}`).toBe(
        content.slice(offset, offset + length),
      );
    }
  }
  expect((await readFileRange(reader, index, node(index, 'foo/bar.txt'), 0, 100)).toString()).toBe('hello\n');
  expect((await readFileRange(reader, index, node(index, 'foo/hard'), 2, 3)).toString()).toBe('llo');
  expect((await readFileRange(reader, index, node(index, 'empty'), 0, 10)).length).toBe(0);
}

describe('vector A (eStargz, gzip 9, chunk 4, prioritized foo/bar.txt)', () => {
  test('blob is the documented one', async () => {
    const { buf } = await loadBlob(VECTOR_A);
    expect(buf.length).toBe(A.size);
    expect(sha256(buf)).toBe(A.sha256);
  });

  test('the documented member layout holds (checked with zlib, independently of the reader)', async () => {
    const { buf } = await loadBlob(VECTOR_A);
    for (let i = 0; i < A.members.length; i++) {
      const [offset, length] = A.members[i]!;
      const end = A.members[i + 1]?.[0] ?? buf.length;
      expect(gunzipSync(buf.subarray(offset, end)).length, `member at ${offset}`).toBe(length);
    }
  });

  test('TOC offset, digests, format and prefetch landmark', async () => {
    const { index, buf } = await open(VECTOR_A);
    expect(index).toMatchObject({
      format: 'estargz',
      compression: 'gzip',
      blobSize: A.size,
      tocOffset: A.tocOffset,
      dataEnd: A.tocOffset,
      tocDigest: A.tocDigest,
      tocJsonDigest: A.tocDigest,
      prefetch: { kind: 'landmark', end: 338 },
    });
    expect(index.manifestChecksum).toBeUndefined();
    // footer hex digits of the TOC offset
    expect(buf.subarray(buf.length - 51 + 16, buf.length - 51 + 32).toString()).toBe('00000000000002a3');
    expect(node(index, '.prefetch.landmark')).toMatchObject({ type: 'reg', size: 1 });
    expect(node(index, '.prefetch.landmark').chunks[0]!.digest).toBe(
      'sha256:dc0e9c3658a1a3ed1ec94274d8b19925c93e1abb7ddba294923ad9bde30f8cb8',
    );
  });

  test('tree facts: nlink, hardlink, xattr, whiteout, modes, owners, mtimes', async () => {
    commonTreeFacts((await open(VECTOR_A)).index);
  });

  test('chunks follow the documented members (spans end at the next member)', async () => {
    const { index } = await open(VECTOR_A);
    const spans = (p: string) =>
      node(index, p).chunks.map((c) => [c.fileOffset, c.size, c.compressedOffset, c.compressedEnd]);
    expect(spans('foo/bar.txt')).toEqual([
      [0, 4, 211, 244],
      [4, 2, 244, 338],
    ]);
    expect(spans('foo/big.bin')).toEqual([
      [0, 4, 442, 475],
      [4, 4, 475, 508],
      [8, 2, 508, 675],
    ]);
    expect(node(index, 'foo/bar.txt').chunks[0]!.digest).toBe(sha256('hell'));
  });

  test('foo/big.bin reads 0123456789 from every offset and length', async () => {
    const { index, reader } = await open(VECTOR_A);
    await everyRange(index, reader);
  });

  test('expectedTocDigest: accepted when equal, DigestMismatchError otherwise', async () => {
    const { reader } = await loadBlob(VECTOR_A);
    await expect(openLayer(reader, { expectedTocDigest: A.tocDigest })).resolves.toBeDefined();
    const err = await openLayer(reader, { expectedTocDigest: B.tocJsonDigest }).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_TOC_DIGEST_MISMATCH')).toBe(true);
  });

  test('reads only the footer and the TOC (1 request when the TOC fits the first read or with a hint; else 2)', async () => {
    const { buf } = await loadBlob(VECTOR_A);
    const plain = new CountingReader(buf);
    await openLayer(plain, { tailGuessBytes: 72 });
    expect(plain.requests).toEqual([
      [A.size - 72, 72],
      [A.tocOffset, A.size - 72 - A.tocOffset],
    ]);
    const guessed = new CountingReader(buf);
    await openLayer(guessed);
    expect(guessed.requests).toEqual([[Math.max(0, A.size - 256 * 1024), Math.min(A.size, 256 * 1024)]]);
    const hinted = new CountingReader(buf);
    await openLayer(hinted, { tocOffsetHint: A.tocOffset });
    expect(hinted.requests.length).toBe(1);
    expect(hinted.requests[0]![0]).toBeLessThanOrEqual(A.tocOffset);
    expect(hinted.requests[0]![0] + hinted.requests[0]![1]).toBe(A.size);
  });

  test('decompressing all members yields the DiffID and contains the TOC and landmark entries (gzip, tar)', async () => {
    // (the gzip/tar CLIs cross-check this in test/integration/format-tools.test.ts)
    const plain = gunzipSync((await loadBlob(VECTOR_A)).buf);
    expect(sha256(plain)).toBe(A.diffId);
    const names = (await readTar(plain)).map((m) => m.name);
    expect(names).toContain('stargz.index.json');
    expect(names).toContain('.prefetch.landmark');
  });
});

describe('vector B (zstd:chunked, stargz flavour, 40-byte GnUlInUx footer)', () => {
  test('blob and footer are the documented ones', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    expect(buf.length).toBe(B.size);
    expect(sha256(buf)).toBe(B.sha256);
    expect(buf.subarray(buf.length - 48).toString('hex')).toBe(B.tail48);
  });

  test('TOC digests: tocDigest = manifest-checksum, tocJsonDigest = TOC digest', async () => {
    const { index, buf } = await open(VECTOR_B);
    expect(index).toMatchObject({
      format: 'zstd:chunked-legacy',
      compression: 'zstd',
      blobSize: B.size,
      tocOffset: B.position[0],
      dataEnd: B.position[0]! - 8,
      tocDigest: B.manifestChecksum,
      manifestChecksum: B.manifestChecksum,
      tocJsonDigest: B.tocJsonDigest,
      prefetch: { kind: 'none' },
    });
    // independent check of the manifest checksum: sha256 of the compressed bytes at the position
    expect(sha256(buf.subarray(B.position[0], B.position[0]! + B.position[1]!))).toBe(B.manifestChecksum);
    const json = zstdDecompress(buf.subarray(B.position[0], B.position[0]! + B.position[1]!));
    expect(json.length).toBe(B.position[2]);
    expect(sha256(json)).toBe(B.tocJsonDigest);
  });

  test('either digest is accepted as expectedTocDigest; a third one is refused', async () => {
    const { reader } = await loadBlob(VECTOR_B);
    await expect(openLayer(reader, { expectedTocDigest: B.manifestChecksum })).resolves.toBeDefined();
    await expect(openLayer(reader, { expectedTocDigest: B.tocJsonDigest })).resolves.toBeDefined();
    const err = await openLayer(reader, { expectedTocDigest: A.tocDigest }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).code).toBe('E_TOC_DIGEST_MISMATCH');
  });

  test('tree facts and the .no.prefetch.landmark entry at offset 97', async () => {
    const { index } = await open(VECTOR_B);
    commonTreeFacts(index);
    expect(node(index, '.no.prefetch.landmark').chunks[0]!.compressedOffset).toBe(97);
    // the landmark is the first TOC entry, so it gets the first id after the root
    expect(node(index, '.no.prefetch.landmark').id).toBe(2);
  });

  test('data offsets: bar.txt 317/337, big.bin 434/454/474 (spans end at the next frame)', async () => {
    const { index } = await open(VECTOR_B);
    const offs = (p: string) => node(index, p).chunks.map((c) => [c.compressedOffset, c.compressedEnd]);
    expect(offs('foo/bar.txt')).toEqual([
      [317, 337],
      [337, 434],
    ]);
    expect(offs('foo/big.bin')).toEqual([
      [434, 454],
      [454, 474],
      [474, 641],
    ]);
  });

  test('foo/big.bin reads 0123456789 from every offset and length', async () => {
    const { index, reader } = await open(VECTOR_B);
    await everyRange(index, reader);
  });

  test('decompressing the blob (zstd -dc) yields the documented DiffID', async () => {
    const plain = zstdDecompress((await loadBlob(VECTOR_B)).buf);
    expect(plain.length).toBe(6656);
    expect(sha256(plain)).toBe(B.diffId);
  });

  test('a manifest-position hint makes openLayer read once', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    const hinted = new CountingReader(buf);
    const index = await openLayer(hinted, { tocOffsetHint: B.position[0] });
    expect(index.tocDigest).toBe(B.manifestChecksum);
    expect(hinted.requests.length).toBe(1);
  });
});
