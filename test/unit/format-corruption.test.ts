/** Verification (spec §9.3 item 3): corrupted chunk data and TOC bytes never yield wrong bytes. */
import { crc32, deflateRawSync, gunzipSync } from 'node:zlib';
import { describe, expect, test } from 'vitest';
import { compress as zstdCompress, decompress as zstdDecompress } from 'zstd-napi';
import { lookupPath } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { DigestMismatchError, StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { estargzFooterBytes, skippableFrame, tocMember } from '../helpers/format-builders.js';
import { failure, loadBlob, sha256, VECTOR_A, VECTOR_B } from '../helpers/format-fixtures.js';

const A_TOC = 'sha256:eb0ed4f2b5a8333488f5b25c8441ac95d1232a96b9e6b034eae0341622392376';
const B_CHECKSUM = 'sha256:609868a8d0f0b24f3b473a3ac6f50f32a98ecf36d8e466dff527e2223b051131';
const B_JSON = 'sha256:0a5d0b175bad3213eeb9a0d7731ac789af75a86469bf095ac0d44286aae9bc99';

/** A chunk failure is a digest mismatch or a decompression error — nothing else. */
function isChunkFailure(err: StoreError): boolean {
  return err instanceof DigestMismatchError || err.code === 'E_DECOMPRESS' || err.code === 'E_TRUNCATED';
}

describe('corrupted chunk data', () => {
  test('vector A: a flipped byte in the deflate data of the member at 475 fails bytes 4-7 only', async () => {
    const { buf } = await loadBlob(VECTOR_A);
    // member [475, 508): 10-byte header, deflate data, 8-byte trailer; corrupt the deflate data
    for (const at of [485, 490, 495, 499]) {
      const bad = Buffer.from(buf);
      bad[at] = bad[at]! ^ 0xff;
      const reader = new BufferRangeReader(bad);
      const index = await openLayer(reader, { expectedTocDigest: A_TOC });
      const big = lookupPath(index, 'foo/big.bin')!;
      const err = await failure(readFileRange(reader, index, big, 4, 4));
      expect(isChunkFailure(err), `${at}: ${err.code}`).toBe(true);
      expect(err.context.path).toBe('foo/big.bin');
      expect(await failure(readFileRange(reader, index, big, 0, 10))).toBeInstanceOf(StoreError);
      expect((await readFileRange(reader, index, big, 0, 4)).toString()).toBe('0123');
      expect((await readFileRange(reader, index, big, 8, 2)).toString()).toBe('89');
    }
  });

  test('vector A: a member whose data is swapped for valid gzip of other bytes fails the digest', async () => {
    const { buf } = await loadBlob(VECTOR_A);
    const original = buf.subarray(475, 508);
    expect(gunzipSync(original).toString()).toBe('4567');
    // a valid gzip member of '4568' padded to the original 33 bytes with an FNAME field
    const deflated = deflateRawSync(Buffer.from('4568'));
    const nameLength = 33 - 10 - 1 - deflated.length - 8;
    const trailer = Buffer.alloc(8);
    trailer.writeUInt32LE(crc32(Buffer.from('4568')), 0);
    trailer.writeUInt32LE(4, 4);
    const replacement = Buffer.concat([
      Buffer.from('1f8b08080000000000ff', 'hex'),
      Buffer.alloc(nameLength, 0x6e),
      Buffer.alloc(1),
      deflated,
      trailer,
    ]);
    expect(replacement.length).toBe(33);
    expect(gunzipSync(replacement).toString()).toBe('4568');
    const bad = Buffer.concat([buf.subarray(0, 475), replacement, buf.subarray(508)]);
    const reader = new BufferRangeReader(bad);
    const index = await openLayer(reader);
    const err = await failure(readFileRange(reader, index, lookupPath(index, 'foo/big.bin')!, 4, 4));
    expect(err).toBeInstanceOf(DigestMismatchError);
    expect(err.code).toBe('E_DIGEST_MISMATCH');
  });

  test('vector B: a flipped byte inside the frame at 454 fails bytes 4-7 only', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    for (const at of [460, 465, 470]) {
      const bad = Buffer.from(buf);
      bad[at] = bad[at]! ^ 0x5a;
      const reader = new BufferRangeReader(bad);
      const index = await openLayer(reader, { expectedTocDigest: B_CHECKSUM });
      const big = lookupPath(index, 'foo/big.bin')!;
      const err = await failure(readFileRange(reader, index, big, 4, 4));
      expect(isChunkFailure(err), `${at}: ${err.code}`).toBe(true);
      expect((await readFileRange(reader, index, big, 0, 4)).toString()).toBe('0123');
      expect((await readFileRange(reader, index, big, 8, 2)).toString()).toBe('89');
    }
  });
});

describe('corrupted TOC', () => {
  /** Rebuild vector A with the TOC JSON changed by `edit` (valid gzip/tar around it). */
  async function vectorAWithToc(edit: (json: Buffer) => Buffer): Promise<Buffer> {
    const { buf } = await loadBlob(VECTOR_A);
    const tar = gunzipSync(buf.subarray(675, buf.length - 51));
    const json = tar.subarray(512, 512 + 2435);
    expect(sha256(json)).toBe(A_TOC);
    return Buffer.concat([buf.subarray(0, 675), tocMember(edit(Buffer.from(json))), estargzFooterBytes(675)]);
  }

  test('vector A: any change of the TOC JSON fails verification against the expected digest', async () => {
    const edits: Array<(j: Buffer) => Buffer> = [
      (j) => Buffer.from(j.toString().replace('"mode": 384', '"mode": 511')), // 0600 -> 0777
      (j) => Buffer.from(j.toString().replace('\t', '  ')), // whitespace only
      (j) => Buffer.concat([j, Buffer.from('\n')]),
      (j) => Buffer.from(j.toString().replace('"foo/big.bin"', '"foo/big.bim"')),
    ];
    for (const edit of edits) {
      const blob = await vectorAWithToc(edit);
      const reader = new BufferRangeReader(blob);
      // still a well-formed layer on its own ...
      const index = await openLayer(reader);
      expect(index.tocDigest).not.toBe(A_TOC);
      // ... but not the layer the caller asked for
      const err = await failure(openLayer(reader, { expectedTocDigest: A_TOC }));
      expect(err).toBeInstanceOf(DigestMismatchError);
      expect(err.code).toBe('E_TOC_DIGEST_MISMATCH');
    }
  });

  test('vector A: flipped bytes in the compressed TOC member are refused (CRC/inflate/tar/JSON)', async () => {
    const { buf } = await loadBlob(VECTOR_A);
    for (let at = 675; at < buf.length - 51; at += 13) {
      const bad = Buffer.from(buf);
      bad[at] = bad[at]! ^ 0x20;
      const err = await failure(openLayer(new BufferRangeReader(bad), { expectedTocDigest: A_TOC }));
      expect(err.code, `byte ${at}`).toMatch(/^E_(BAD_TOC|TOC_DIGEST_MISMATCH|TOC_TOO_LARGE)$/);
    }
  });

  test('vector B: a re-compressed, edited manifest matches neither digest', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    const json = zstdDecompress(buf.subarray(649, 649 + 798));
    const edited = Buffer.from(json.toString().replace('"mode": 384', '"mode": 511'));
    expect(edited.equals(json)).toBe(false);
    const manifest = zstdCompress(edited);
    const footer = Buffer.alloc(40);
    footer.writeBigUInt64LE(649n, 0);
    footer.writeBigUInt64LE(BigInt(manifest.length), 8);
    footer.writeBigUInt64LE(BigInt(edited.length), 16);
    footer.writeBigUInt64LE(1n, 24);
    footer.write('GnUlInUx', 32, 'latin1');
    const blob = Buffer.concat([buf.subarray(0, 641), skippableFrame(manifest), skippableFrame(footer)]);
    const reader = new BufferRangeReader(blob);
    const index = await openLayer(reader);
    expect(lookupPath(index, 'foo/big.bin')!.mode).toBe(0o777);
    for (const expected of [B_CHECKSUM, B_JSON]) {
      expect((await failure(openLayer(reader, { expectedTocDigest: expected }))).code).toBe(
        'E_TOC_DIGEST_MISMATCH',
      );
    }
  });

  test('vector B: flipped bytes in the compressed manifest are refused', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    for (let at = 649; at < 649 + 798; at += 11) {
      const bad = Buffer.from(buf);
      bad[at] = bad[at]! ^ 0x01;
      const err = await failure(openLayer(new BufferRangeReader(bad), { expectedTocDigest: B_CHECKSUM }));
      expect(err.code, `byte ${at}`).toMatch(/^E_(BAD_TOC|TOC_DIGEST_MISMATCH)$/);
    }
  });

  test('anything unexpected escaping the parsers is a typed E_BAD_TOC with its cause', async () => {
    // a reader breaking its contract (a Uint8Array, not a Buffer) makes the footer code throw a
    // TypeError deep inside: the caller still gets a StoreError, never a raw exception
    const reader = { size: 100_000, read: async (_o: number, l: number) => new Uint8Array(l) as Buffer };
    const err = await failure(openLayer(reader));
    expect(err.code).toBe('E_BAD_TOC');
    expect(err.cause).toBeInstanceOf(TypeError);
  });
});
