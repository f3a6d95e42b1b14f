/** Footer byte constants (spec §9.1) and footer detection for every format. */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { describe, expect, test } from 'vitest';
import {
  estargzFooter,
  findEStargzFooter,
  isExternalTocFooter,
  parseEStargzFooter,
} from '../../src/format/estargz/footer.js';
import { openLayer } from '../../src/format/open-layer.js';
import { parseZstdFooter } from '../../src/format/zstdchunked/footer.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader, FileRangeReader } from '../../src/util/range-reader.js';
import { loadBlob, SAMPLES_TINY, VECTOR_A, VECTOR_B } from '../helpers/format-fixtures.js';

const FOOTER_51 =
  '1f8b08040000000000ff1a00534716003030303030303030303030303132333453544152475a010000ffff0000000000000000';
const FOOTER_47 =
  '1f8b08040000000000ff16003030303030303030303030303132333453544152475a010000ffff0000000000000000';
/** External-TOC footer built from the spec text: XLEN 21, `SG`, LEN 17, `STARGZEXTERNALTOC`. */
const EXTERNAL_46 = Buffer.concat([
  Buffer.from('1f8b08040000000000ff1500534711', 'hex'),
  Buffer.from('00', 'hex'),
  Buffer.from('STARGZEXTERNALTOC', 'latin1'),
  Buffer.from('010000ffff', 'hex'),
  Buffer.alloc(8),
]);

async function errorCode(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreError);
  return (err as StoreError).code;
}

describe('eStargz footers (spec §1.6, §9.1)', () => {
  test('the documented constants gunzip to nothing (zlib) and parse to 4660', async () => {
    for (const [hex, legacy] of [
      [FOOTER_51, false],
      [FOOTER_47, true],
    ] as const) {
      const bytes = Buffer.from(hex, 'hex');
      expect(gunzipSync(bytes).length).toBe(0);
      expect(await parseEStargzFooter(bytes, legacy)).toBe(4660);
      expect(await findEStargzFooter(Buffer.concat([Buffer.alloc(30, 7), bytes]))).toEqual({
        tocOffset: 4660,
        footerSize: bytes.length,
      });
    }
    expect(EXTERNAL_46.length).toBe(46);
    expect(gunzipSync(EXTERNAL_46).length).toBe(0);
  });

  test('estargzFooter() writes the documented bytes', () => {
    expect(estargzFooter(0x1234).toString('hex')).toBe(FOOTER_51);
  });

  test('a 51-byte footer whose subfield id is not SG is rejected', async () => {
    const bytes = Buffer.from(FOOTER_51, 'hex');
    bytes[13] = 0x48; // 'SH'
    expect(await errorCode(parseEStargzFooter(bytes, false))).toBe('E_BAD_FOOTER');
    expect(await errorCode(findEStargzFooter(bytes))).toBe('E_BAD_FOOTER');
  });

  test('invalid gzip framing is rejected: CRC, ISIZE, magic, subfield length, hex digits, suffix', async () => {
    const mutations: Array<[number, number]> = [
      [43, 1], // CRC32
      [47, 1], // ISIZE
      [0, 0x1e], // magic
      [14, 21], // subfield length
      [20, 0x67], // 'g' is not a hex digit
      [37, 0x59], // STARGY
      [38, 0x00], // deflate block no longer final
    ];
    for (const [at, value] of mutations) {
      const bytes = Buffer.from(FOOTER_51, 'hex');
      bytes[at] = value;
      expect(await errorCode(parseEStargzFooter(bytes, false)), `byte ${at}`).toBe('E_BAD_FOOTER');
    }
    expect(await errorCode(parseEStargzFooter(Buffer.from(FOOTER_51, 'hex').subarray(1), false))).toBe(
      'E_BAD_FOOTER',
    );
  });

  test('external-TOC footer is recognised and refused with E_UNSUPPORTED_FORMAT', async () => {
    expect(isExternalTocFooter(EXTERNAL_46)).toBe(true);
    expect(isExternalTocFooter(Buffer.from(FOOTER_51, 'hex').subarray(5))).toBe(false);
    const blob = Buffer.concat([Buffer.alloc(100), EXTERNAL_46]);
    expect(await errorCode(openLayer(new BufferRangeReader(blob)))).toBe('E_UNSUPPORTED_FORMAT');
  });

  test('TOC offset at or past the footer is refused', async () => {
    const blob = Buffer.concat([Buffer.alloc(10), estargzFooter(10)]);
    expect(await errorCode(openLayer(new BufferRangeReader(blob)))).toBe('E_BAD_FOOTER');
    const far = Buffer.concat([Buffer.alloc(10), estargzFooter(2 ** 40)]);
    expect(await errorCode(openLayer(new BufferRangeReader(far)))).toBe('E_BAD_FOOTER');
  });
});

describe('zstd:chunked footers', () => {
  test('vector B: legacy 40-byte GnUlInUx payload', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    expect(parseZstdFooter(buf.subarray(buf.length - 72), buf.length)).toEqual({
      flavour: 'legacy',
      footerSize: 48,
      manifestOffset: 649,
      manifestLength: 798,
      manifestUncompressedLength: 2437,
    });
  });

  test('legacy footer: wrong type, out-of-range offset, bad skippable header are E_BAD_FOOTER', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    const variants: Array<(b: Buffer) => void> = [
      (b) => b.writeBigUInt64LE(2n, b.length - 16), // type
      (b) => b.writeBigUInt64LE(BigInt(b.length), b.length - 40), // offset
      (b) => b.writeBigUInt64LE(4n, b.length - 40), // offset inside the first 8 bytes
      (b) => b.writeBigUInt64LE(0n, b.length - 32), // compressed length 0
      (b) => b.writeBigUInt64LE(2n ** 64n - 1n, b.length - 32), // huge length
      (b) => (b[b.length - 48] = 0x51), // skippable magic low byte 0x51 is allowed ...
      (b) => b.writeUInt32LE(41, b.length - 44), // ... a wrong frame length is not
    ];
    const codes: string[] = [];
    for (const mutate of variants) {
      const copy = Buffer.from(buf);
      mutate(copy);
      codes.push(
        await openLayer(new BufferRangeReader(copy)).then(
          () => 'ok',
          (e: unknown) => (e instanceof StoreError ? e.code : 'untyped'),
        ),
      );
    }
    expect(codes).toEqual([
      'E_BAD_FOOTER',
      'E_BAD_FOOTER',
      'E_BAD_FOOTER',
      'E_BAD_FOOTER',
      'E_BAD_FOOTER',
      'ok',
      'E_BAD_FOOTER',
    ]);
  });
});

describe('a truncated zstd:chunked blob', () => {
  test('the error names both formats tried', async () => {
    const { buf } = await loadBlob(VECTOR_B);
    // the footer is cut off: no format's footer is left at the end
    for (const cut of [1, 30, 200]) {
      const err = await openLayer(new BufferRangeReader(buf.subarray(0, buf.length - cut))).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreError);
      expect((err as StoreError).code).toBe('E_BAD_FOOTER');
      expect((err as StoreError).message).toMatch(/^not eStargz \(.+\) and not zstd:chunked \(.+\)$/);
      expect((err as StoreError).message).not.toContain('\n');
    }
  });
});

describe('not a lazy layer', () => {
  test('plain gzip and plain bytes are E_BAD_FOOTER; tiny blobs too', async () => {
    const dir = join(SAMPLES_TINY, 'gzip');
    const file = (await readdir(dir)).find((f) => f.endsWith('.tar.gz'))!;
    const reader = await FileRangeReader.open(join(dir, file));
    try {
      expect(await errorCode(openLayer(reader))).toBe('E_BAD_FOOTER');
    } finally {
      await reader.close();
    }
    expect(await errorCode(openLayer(new BufferRangeReader(Buffer.alloc(0))))).toBe('E_BAD_FOOTER');
    expect(await errorCode(openLayer(new BufferRangeReader(Buffer.alloc(4096, 0xab))))).toBe('E_BAD_FOOTER');
  });

  test('every truncation of vector A and B is a typed error, never a crash', async () => {
    for (const path of [VECTOR_A, VECTOR_B]) {
      const { buf } = await loadBlob(path);
      for (let len = 0; len < buf.length; len += 7) {
        expect(
          await errorCode(openLayer(new BufferRangeReader(buf.subarray(0, len)))),
          `${path} ${len}`,
        ).toMatch(/^E_/);
      }
    }
  });
});
