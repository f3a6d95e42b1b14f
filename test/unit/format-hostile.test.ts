/**
 * Issue 14, hostile layers, through the public openLayer API: property-based and hand-written
 * cases over the footers and TOC fields of both formats. Every case ends in a typed StoreError or
 * a consistent tree whose every returned byte verifies; nothing else escapes.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { lookupPath, type LayerIndex } from '../../src/format/model.js';
import { openLayer, type OpenLayerOptions } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildEStargz, buildZstdChunked, estargzFooterBytes, tocMember } from '../helpers/format-builders.js';
import { sha256 } from '../helpers/format-fixtures.js';

type Entry = Record<string, unknown>;

const outcome = { typed: 0, trees: 0, filesVerified: 0, bytesVerified: 0 };

/** openLayer + read every regular file; only StoreErrors may escape; returned bytes verify. */
async function settle(blob: Buffer, opts: OpenLayerOptions = {}): Promise<LayerIndex | StoreError> {
  const reader = new BufferRangeReader(blob);
  let index: LayerIndex;
  try {
    index = await openLayer(reader, opts);
  } catch (err) {
    if (!(err instanceof StoreError))
      throw new Error(`untyped error: ${(err as Error).stack ?? String(err)}`);
    expect(err.code).toMatch(/^E_[A-Z_]+$/);
    outcome.typed++;
    return err;
  }
  outcome.trees++;
  for (const node of index.nodes) {
    if (node === undefined) continue;
    expect(index.nodes[node.id]).toBe(node);
    expect(node.path.startsWith('/')).toBe(false);
    expect(node.path.split('/')).not.toContain('..');
    expect(node.path.split('/')).not.toContain('.');
    if (node.path !== '') expect(lookupPath(index, node.path)).toBe(node);
    if (node.type !== 'reg' || node.size > 1 << 20) continue;
    let data: Buffer;
    try {
      data = await readFileRange(reader, index, node, 0, node.size);
    } catch (err) {
      if (!(err instanceof StoreError)) throw new Error(`untyped read error: ${String(err)}`);
      continue;
    }
    expect(data.length).toBe(node.size);
    for (const c of node.chunks) {
      const got = createHash('sha256')
        .update(data.subarray(c.fileOffset, c.fileOffset + c.size))
        .digest('hex');
      expect('sha256:' + got).toBe(c.digest);
    }
    outcome.filesVerified++;
    outcome.bytesVerified += data.length;
  }
  return index;
}

const HOSTILE_NAMES = [
  '..',
  '../../etc/passwd',
  '/etc/shadow',
  '/',
  './',
  'a/../../b',
  'a//b/./c',
  'a/b/../../..',
  '.',
  '',
  'x\0y',
  'ü/ß',
  'a/'.repeat(300) + 'z',
  'n'.repeat(300),
];
const hostileName = fc.oneof(
  fc.constantFrom(...HOSTILE_NAMES),
  fc
    .array(fc.constantFrom('a', 'b', '..', '.', '', 'c'), { minLength: 1, maxLength: 5 })
    .map((p) => p.join('/')),
);
const hostileNumber = fc.oneof(
  fc.integer({ min: -5, max: 5000 }),
  fc.constantFrom(-1, 0.5, 2 ** 31, 2 ** 32 + 1, 2 ** 53, 2 ** 64, Number.MAX_SAFE_INTEGER, 1e300),
  fc.constantFrom('12', null, true, [], {}),
);

describe('zstd:chunked TOCs: property-based', () => {
  const segments = ['abcd', 'efgh', 'ij', 'hello\n', '\x00\x00\x00\x00'].map((s) => Buffer.from(s));
  const { offsets } = buildZstdChunked(segments, () => ({ version: 1, entries: [] }));
  const digests = [...segments.map((s) => sha256(s)), 'sha256:' + 'f'.repeat(64), 'md5:0', ''];

  test('random fields over real frames: typed errors or a verifying tree', async () => {
    const field = fc.record(
      {
        name: hostileName,
        type: fc.constantFrom(
          'dir',
          'reg',
          'symlink',
          'hardlink',
          'char',
          'block',
          'fifo',
          'chunk',
          'sock',
          'x',
        ),
        size: hostileNumber,
        offset: fc.oneof(fc.constantFrom(...offsets), hostileNumber),
        endOffset: fc.oneof(fc.constantFrom(...offsets), hostileNumber),
        chunkOffset: hostileNumber,
        chunkSize: hostileNumber,
        chunkDigest: fc.constantFrom(...digests),
        digest: fc.constantFrom(...digests),
        chunkType: fc.constantFrom('', 'zeros', 'holes', 'bogus'),
        linkName: hostileName,
        mode: hostileNumber,
        devMajor: hostileNumber,
        devMinor: hostileNumber,
        uid: hostileNumber,
      },
      { requiredKeys: [] },
    );
    // a valid two-chunk file, one field of one entry replaced, plus random extra entries
    const base = (name: string): Entry[] => [
      {
        type: 'reg',
        name,
        size: 8,
        digest: sha256('abcdefgh'),
        offset: offsets[0],
        endOffset: offsets[2],
        chunkSize: 4,
        chunkDigest: digests[0],
      },
      { type: 'chunk', name, offset: offsets[1], chunkOffset: 4, chunkSize: 4, chunkDigest: digests[1] },
      {
        type: 'reg',
        name: 'z',
        size: 4,
        digest: sha256(Buffer.alloc(4)),
        chunkType: 'zeros',
        chunkDigest: sha256(Buffer.alloc(4)),
        offset: offsets[4],
        endOffset: offsets[5],
      },
    ];
    await fc.assert(
      fc.asyncProperty(
        hostileName,
        fc.nat({ max: 2 }),
        field,
        fc.array(field, { maxLength: 4 }),
        async (name, which, patch, extra) => {
          const entries = base(name).map((e, i) => (i === which ? { ...e, ...patch } : e));
          const { blob } = buildZstdChunked(segments, () => ({
            version: 1,
            entries: [...entries, ...extra],
          }));
          await settle(blob);
        },
      ),
      { numRuns: 250 },
    );
  });

  test('every footer field set to hostile values: typed error or a verifying tree', async () => {
    const entries: Entry[] = [
      { type: 'reg', name: 'a', size: 4, digest: digests[0], offset: offsets[0], endOffset: offsets[1] },
    ];
    const good = buildZstdChunked(segments, () => ({ version: 1, entries })).blob;
    const u64 = fc.oneof(
      fc.bigInt({ min: 0n, max: BigInt(good.length) + 16n }),
      fc.constantFrom(0n, 2n ** 53n, 2n ** 63n, 2n ** 64n - 1n, 0xffffffffn),
    );
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: 6 }), u64, async (field, value) => {
        const blob = Buffer.from(good);
        blob.writeBigUInt64LE(value, blob.length - 64 + field * 8);
        await settle(blob);
      }),
      { numRuns: 200 },
    );
  });
});

describe('eStargz footer: hostile TOC offsets', () => {
  test('any TOC offset in the footer: typed error or a verifying tree', async () => {
    const payloads = [Buffer.from('abcd'), Buffer.from('efgh')];
    const built = buildEStargz(payloads, (o) => ({
      version: 1,
      entries: [
        {
          name: 'a',
          type: 'reg',
          size: 4,
          offset: o[0],
          chunkDigest: sha256('abcd'),
          digest: sha256('abcd'),
        },
      ],
    }));
    const body = built.blob.subarray(0, built.blob.length - 51);
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.nat({ max: built.blob.length + 100 }),
          fc.constantFrom(2 ** 53, 2 ** 60, 0xffffffff, built.tocOffset + 1, built.tocOffset - 1),
        ),
        async (tocOffset) => {
          await settle(Buffer.concat([body, estargzFooterBytes(tocOffset)]));
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('hand-written hostile TOCs (both formats where it applies)', () => {
  const blobs = (entries: (o: number[]) => Entry[]): Array<[string, Buffer]> => {
    const payloads = [Buffer.from('abcd'), Buffer.from('efgh')];
    return [
      ['estargz', buildEStargz(payloads, (o) => ({ version: 1, entries: entries(o) })).blob],
      ['zstd:chunked', buildZstdChunked(payloads, (o) => ({ version: 1, entries: entries(o) })).blob],
    ];
  };

  test('names with .. and absolute paths stay inside the root', async () => {
    for (const [format, blob] of blobs(() => [
      { name: '../../../etc', type: 'dir' },
      { name: '/abs/dir', type: 'dir' },
      { name: 'a/../../../b', type: 'dir' },
      { name: '../../x/../y', type: 'symlink', linkName: '../../../../etc/shadow' },
    ])) {
      const index = await settle(blob);
      expect(index, format).not.toBeInstanceOf(StoreError);
      const idx = index as LayerIndex;
      expect(lookupPath(idx, 'etc')?.type).toBe('dir');
      expect(lookupPath(idx, 'abs/dir')?.type).toBe('dir');
      expect(lookupPath(idx, 'b')?.type).toBe('dir');
      // a symlink target is data, served as is, never resolved by the store
      expect(lookupPath(idx, 'y')).toMatchObject({ type: 'symlink', linkName: '../../../../etc/shadow' });
    }
  });

  test('symlink cycles and self-links are plain data', async () => {
    for (const [format, blob] of blobs(() => [
      { name: 'a', type: 'symlink', linkName: 'b' },
      { name: 'b', type: 'symlink', linkName: 'a' },
      { name: 'self', type: 'symlink', linkName: 'self' },
      { name: 'd', type: 'dir' },
      { name: 'd/up', type: 'symlink', linkName: '..' },
    ])) {
      const index = await settle(blob);
      expect(index, format).not.toBeInstanceOf(StoreError);
      expect(lookupPath(index as LayerIndex, 'a')).toMatchObject({ type: 'symlink', linkName: 'b' });
    }
  });

  test('long hardlink chains resolve; hardlink cycles are refused', async () => {
    const chain = (o: number[]): Entry[] => [
      {
        name: 'f0',
        type: 'reg',
        size: 4,
        offset: o[0],
        endOffset: o[1],
        digest: sha256('abcd'),
        chunkDigest: sha256('abcd'),
      },
      ...Array.from({ length: 2000 }, (_, i) => ({ name: `f${i + 1}`, type: 'hardlink', linkName: `f${i}` })),
    ];
    for (const [format, blob] of blobs(chain)) {
      const index = await settle(blob);
      expect(index, format).not.toBeInstanceOf(StoreError);
      expect(lookupPath(index as LayerIndex, 'f2000')?.type).toBe('reg');
    }
    for (const [format, blob] of blobs(() => [
      { name: 'x', type: 'hardlink', linkName: 'y' },
      { name: 'y', type: 'hardlink', linkName: 'z' },
      { name: 'z', type: 'hardlink', linkName: 'x' },
    ])) {
      const err = await settle(blob);
      expect(err, format).toBeInstanceOf(StoreError);
    }
  });

  test('devices with hostile numbers: typed error or exact values', async () => {
    for (const [major, minor] of [
      [0, 0],
      [4095, 1048575],
      [2 ** 32, 1],
      [-1, 3],
      [1.5, 2],
      [Number.MAX_SAFE_INTEGER, 0],
    ] as const) {
      for (const [format, blob] of blobs(() => [
        { name: 'dev/c', type: 'char', devMajor: major, devMinor: minor },
        { name: 'dev/b', type: 'block', devMajor: major, devMinor: minor },
      ])) {
        const index = await settle(blob);
        if (index instanceof StoreError) continue;
        const c = lookupPath(index, 'dev/c')!;
        expect(c.type, format).toBe('char');
        expect([c.devMajor, c.devMinor]).toEqual([major, minor]);
      }
    }
  });

  test('misaligned offsets (inside a member/frame, past the data) never give wrong bytes', async () => {
    for (const delta of [1, 3, 9, -1]) {
      for (const [format, blob] of blobs((o) => [
        {
          name: 'good',
          type: 'reg',
          size: 4,
          offset: o[0],
          endOffset: o[1],
          digest: sha256('abcd'),
          chunkDigest: sha256('abcd'),
        },
        {
          name: 'bad',
          type: 'reg',
          size: 4,
          offset: o[1]! + delta,
          endOffset: o[2],
          digest: sha256('efgh'),
          chunkDigest: sha256('efgh'),
        },
      ])) {
        const index = await settle(blob);
        if (index instanceof StoreError) continue;
        // the good file never depends on its neighbour's bad offset
        const reader = new BufferRangeReader(blob);
        const good = lookupPath(index, 'good')!;
        const data = await readFileRange(reader, index, good, 0, 4);
        expect(data.toString(), `${format} delta ${delta}`).toBe('abcd');
      }
    }
  });

  test('deep nesting up to the path limit builds; beyond it is refused', async () => {
    const depth = 2000;
    const dirs = (n: number): Entry[] =>
      Array.from({ length: n }, (_, i) => ({
        name: Array.from({ length: i + 1 }, () => 'd').join('/'),
        type: 'dir',
      }));
    for (const [format, blob] of blobs(() => dirs(depth))) {
      const index = await settle(blob);
      expect(index, format).not.toBeInstanceOf(StoreError);
      expect((index as LayerIndex).nodes.filter((n) => n?.type === 'dir').length).toBe(depth + 1);
    }
    for (const [format, blob] of blobs(() => [{ name: 'd/'.repeat(5000) + 'x', type: 'dir' }])) {
      const err = await settle(blob);
      expect(err, format).toBeInstanceOf(StoreError);
    }
  });

  test('a 2,000,000-entry TOC above maxEntries is refused before it is parsed', async () => {
    const n = 2_000_000;
    const parts: string[] = [];
    for (let i = 0; i < n; i++) parts.push(`{"name":"d${i}","type":"dir"}`);
    const json = `{"version":1,"entries":[${parts.join(',')}]}`;
    const { blob } = buildEStargz([], () => json);
    global.gc?.();
    const before = process.memoryUsage.rss();
    const err = await settle(blob, { maxEntries: 100_000 });
    const growthMiB = (process.memoryUsage.rss() - before) / 2 ** 20;
    expect(err).toBeInstanceOf(StoreError);
    // refused while counting, before the rest of the entries are even read
    expect((err as StoreError).code).toBe('E_TOO_MANY_ENTRIES');
    expect((err as StoreError).message).toMatch(/more entries than the limit of 100000/);
    console.log(
      `2,000,000-entry TOC (${json.length} bytes of JSON): refused, RSS growth ${growthMiB.toFixed(0)} MiB`,
    );
    // parsed, this TOC costs ~1.9 GB; refused early it costs about its own text
    expect(growthMiB).toBeLessThan(600);
  });

  test('a TOC member that claims another name, or is empty, is refused typed', async () => {
    for (const member of [tocMember('{"version":1,"entries":[]}', 'not-the-toc.json'), tocMember('')]) {
      const blob = Buffer.concat([member, estargzFooterBytes(0)]);
      const err = await settle(blob);
      expect(err).toBeInstanceOf(StoreError);
    }
  });

  test('summary', () => {
    console.log(
      `hostile layers: ${outcome.typed} typed errors, ${outcome.trees} trees, ` +
        `${outcome.filesVerified} files / ${outcome.bytesVerified} bytes verified`,
    );
    expect(outcome.typed).toBeGreaterThan(50);
    expect(outcome.trees).toBeGreaterThan(20);
  });
});
