/** TOC parsing and normalisation (spec §1.4, §1.8), including hostile TOCs. */
import { describe, expect, test } from 'vitest';
import { lookupPath, type LayerIndex } from '../../src/format/model.js';
import { openLayer, type OpenLayerOptions } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { cleanEntryName } from '../../src/format/toc-names.js';
import { parseModTime } from '../../src/format/toc-tree.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildEStargz, estargzFooterBytes, tocMember } from '../helpers/format-builders.js';
import { failure, sha256 } from '../helpers/format-fixtures.js';

type Entry = Record<string, unknown>;

/** eStargz blob whose members are `payloads` and whose TOC is entries(offsets). */
async function open(
  payloads: Buffer[],
  entries: (off: number[]) => Entry[],
  opts: OpenLayerOptions = {},
): Promise<{ index: LayerIndex; reader: BufferRangeReader }> {
  const { blob } = buildEStargz(payloads, (off) => ({ version: 1, entries: entries(off) }));
  const reader = new BufferRangeReader(blob);
  return { index: await openLayer(reader, opts), reader };
}

const reg = (name: string, data: string, offset: number, extra: Entry = {}): Entry => ({
  name,
  type: 'reg',
  size: data.length,
  offset,
  digest: sha256(data),
  chunkDigest: sha256(data),
  ...extra,
});

describe('names', () => {
  test('./a/../b, /b and b are the same; .. never escapes the root', () => {
    expect(cleanEntryName('./a/../b')).toBe('b');
    expect(cleanEntryName('/b')).toBe('b');
    expect(cleanEntryName('b')).toBe('b');
    expect(cleanEntryName('./foo/')).toBe('foo');
    expect(cleanEntryName('../../../etc/passwd')).toBe('etc/passwd');
    expect(cleanEntryName('a//b/./c/..')).toBe('a/b');
    for (const root of ['./', '/', '.', '', '..', 'a/..']) expect(cleanEntryName(root)).toBe('');
  });

  test('NUL, over-long paths and components are E_HOSTILE_PATH', () => {
    const codeOf = (f: () => unknown): string => {
      try {
        f();
      } catch (e) {
        return (e as StoreError).code;
      }
      return 'none';
    };
    expect(codeOf(() => cleanEntryName('a\0b'))).toBe('E_HOSTILE_PATH');
    expect(codeOf(() => cleanEntryName('x'.repeat(256)))).toBe('E_HOSTILE_PATH');
    expect(codeOf(() => cleanEntryName('x'.repeat(255)))).toBe('none');
    expect(codeOf(() => cleanEntryName(Array(20).fill('y'.repeat(250)).join('/')))).toBe('E_HOSTILE_PATH');
  });

  test('hostile names in a TOC land inside the root (or fail typed)', async () => {
    const { index, reader } = await open([Buffer.from('pwned')], (off) => [
      reg('../../../etc/passwd', 'pwned', off[0]!),
      { name: '/../..//./', type: 'dir', mode: 0o700 },
    ]);
    const n = lookupPath(index, 'etc/passwd')!;
    expect(n.path).toBe('etc/passwd');
    expect((await readFileRange(reader, index, n, 0, 10)).toString()).toBe('pwned');
    expect(index.root.mode).toBe(0o700);
    const nul = await failure(open([], () => [{ name: 'a\0/b', type: 'dir' }]));
    expect(nul.code).toBe('E_HOSTILE_PATH');
  });

  test('duplicates after cleaning: the last entry wins; dirs merge', async () => {
    const { index, reader } = await open([Buffer.from('one'), Buffer.from('two')], (off) => [
      reg('./a/../b', 'one', off[0]!, { mode: 0o600 }),
      reg('/b', 'two', off[1]!, { mode: 0o640 }),
      { name: 'd/x', type: 'symlink', linkName: 'y' },
      { name: './d/', type: 'dir', mode: 0o711 },
      { name: 'd', type: 'dir', mode: 0o750 },
    ]);
    const b = lookupPath(index, 'b')!;
    expect(b.mode).toBe(0o640);
    expect((await readFileRange(reader, index, b, 0, 10)).toString()).toBe('two');
    expect(lookupPath(index, 'd')!.mode).toBe(0o750);
    expect(lookupPath(index, 'd/x')!.linkName).toBe('y');
    // only reachable nodes get ids, densely, in TOC order
    expect(index.nodes.slice(1).map((n) => n.path)).toEqual(['', 'b', 'd', 'd/x']);
  });
});

describe('normalisation', () => {
  test('root ./ entry supplies root metadata; implicit parents are 0755 dirs', async () => {
    const { index } = await open([], () => [
      { name: './', type: 'dir', mode: 0o40700, uid: 7, gid: 8, modtime: '2020-01-02T03:04:05Z' },
      { name: 'a/b/c', type: 'fifo', mode: 0o10600 },
    ]);
    expect(index.root).toMatchObject({
      mode: 0o700,
      uid: 7,
      gid: 8,
      mtime: Date.UTC(2020, 0, 2, 3, 4, 5) / 1000,
    });
    expect(lookupPath(index, 'a')).toMatchObject({ type: 'dir', mode: 0o755, uid: 0, mtime: 0, nlink: 3 });
    expect(lookupPath(index, 'a/b')).toMatchObject({ type: 'dir', mode: 0o755, nlink: 2 });
    expect(lookupPath(index, 'a/b/c')).toMatchObject({ type: 'fifo', mode: 0o600 });
    expect(index.root.nlink).toBe(3);
  });

  test('keys are matched case-insensitively (Go encoding/json)', async () => {
    const { index, reader } = await open([Buffer.from('data')], (off) => [
      {
        NAME: 'f',
        TYPE: 'reg',
        Size: 4,
        OFFSET: off[0],
        ChunkDigest: sha256('data'),
        MODE: 0o644,
        UserName: 'u',
      },
    ]);
    const f = lookupPath(index, 'f')!;
    expect(f).toMatchObject({ size: 4, mode: 0o644, uname: 'u' });
    expect((await readFileRange(reader, index, f, 0, 4)).toString()).toBe('data');
  });

  test('uname/gname are back-filled per id; xattrs decoded; devices keep numbers', async () => {
    const { index } = await open([], () => [
      { name: 'a', type: 'dir', uid: 5, gid: 6, userName: 'five', groupName: 'six' },
      { name: 'a/b', type: 'dir', uid: 5, gid: 6 },
      { name: 'a/c', type: 'dir', uid: 9, gid: 6, xattrs: { 'user.x': 'aGk=', 'trusted.y': '' } },
      { name: 'dev/null', type: 'char', mode: 0o20666, devMajor: 1, devMinor: 3 },
      { name: 'dev/sda', type: 'block', devMajor: 8, devMinor: 0 },
    ]);
    expect(lookupPath(index, 'a/b')).toMatchObject({ uname: 'five', gname: 'six' });
    const c = lookupPath(index, 'a/c')!;
    expect(c.uname).toBeUndefined();
    expect(c.gname).toBe('six');
    expect(c.xattrs.get('user.x')!.toString()).toBe('hi');
    expect(c.xattrs.get('trusted.y')!.length).toBe(0);
    expect(lookupPath(index, 'dev/null')).toMatchObject({
      type: 'char',
      mode: 0o666,
      devMajor: 1,
      devMinor: 3,
    });
    expect(lookupPath(index, 'dev/sda')).toMatchObject({ type: 'block', devMajor: 8, devMinor: 0 });
  });

  test('modtime: RFC 3339 to seconds; missing, Go zero time and garbage are 0', () => {
    expect(parseModTime('2020-01-02T03:04:05Z')).toBe(1577934245);
    expect(parseModTime('2020-01-02T03:04:05.999Z')).toBe(1577934245);
    expect(parseModTime('2020-01-02T05:04:05+02:00')).toBe(1577934245);
    expect(parseModTime('1970-01-01T00:00:00Z')).toBe(0);
    expect(parseModTime('1969-12-31T23:59:59Z')).toBe(-1);
    expect(parseModTime('0001-01-01T00:00:00Z')).toBe(0);
    expect(parseModTime(undefined)).toBe(0);
    expect(parseModTime('')).toBe(0);
    expect(parseModTime('yesterday')).toBe(0);
    expect(parseModTime('2020-13-01T00:00:00Z')).toBe(0);
  });

  test('chunkSize absent: on a chunk = to end of file, on a reg = whole file', async () => {
    const parts = ['abcd', 'efgh', 'ij'];
    const { index, reader } = await open(
      parts.map((p) => Buffer.from(p)),
      (off) => [
        { name: 'f', type: 'reg', size: 10, offset: off[0], chunkSize: 4, chunkDigest: sha256('abcd') },
        {
          name: 'f',
          type: 'chunk',
          offset: off[1],
          chunkOffset: 4,
          chunkSize: 4,
          chunkDigest: sha256('efgh'),
        },
        { name: 'f', type: 'chunk', offset: off[2], chunkOffset: 8, chunkDigest: sha256('ij') },
        reg('g', 'abcd', off[0]!, { chunkSize: undefined }),
      ],
    );
    const f = lookupPath(index, 'f')!;
    expect(f.chunks.map((c) => [c.fileOffset, c.size])).toEqual([
      [0, 4],
      [4, 4],
      [8, 2],
    ]);
    expect((await readFileRange(reader, index, f, 3, 6)).toString()).toBe('defghi');
    expect(lookupPath(index, 'g')!.chunks.map((c) => c.size)).toEqual([4]);
  });

  test('innerOffset: several files in one member read fine; duplicate offsets are allowed', async () => {
    const { index, reader } = await open([Buffer.from('AAABBxyz')], (off) => [
      reg('a', 'AAA', off[0]!),
      reg('b', 'BB', off[0]!, { innerOffset: 3 }),
      reg('c', 'xyz', off[0]!, { innerOffset: 5 }),
    ]);
    for (const [p, want] of [
      ['a', 'AAA'],
      ['b', 'BB'],
      ['c', 'xyz'],
    ] as const) {
      const n = lookupPath(index, p)!;
      expect((await readFileRange(reader, index, n, 0, 10)).toString()).toBe(want);
      expect(n.chunks[0]).toMatchObject({ compressedOffset: 0, compressedEnd: index.dataEnd });
    }
  });

  test('hardlinks: chains in any order resolve to one node; nlink counts names', async () => {
    const { index } = await open([Buffer.from('x')], (off) => [
      { name: 'l3', type: 'hardlink', linkName: 'l2' },
      { name: 'l2', type: 'hardlink', linkName: './sub/../l1' },
      { name: 'l1', type: 'hardlink', linkName: 'target' },
      reg('target', 'x', off[0]!),
    ]);
    const t = lookupPath(index, 'target')!;
    for (const p of ['l1', 'l2', 'l3']) expect(lookupPath(index, p)).toBe(t);
    expect(t.nlink).toBe(4);
  });

  test('a long hardlink chain in reverse order does not exhaust the stack', async () => {
    const n = 20_000;
    const { index } = await open([], () => [
      ...Array.from({ length: n }, (_, i) => ({ name: `h${i}`, type: 'hardlink', linkName: `h${i + 1}` })),
      { name: `h${n}`, type: 'fifo' },
    ]);
    expect(lookupPath(index, 'h0')!.nlink).toBe(n + 1);
  });

  test('landmarks set the prefetch hint and stay in the tree; only at the root', async () => {
    const lm = Buffer.from([0x0f]);
    const with1 = await open([Buffer.from('p'), lm], (off) => [
      reg('p', 'p', off[0]!),
      reg('.prefetch.landmark', '\x0f', off[1]!),
    ]);
    expect(with1.index.prefetch).toEqual({
      kind: 'landmark',
      end: with1.index.nodes[3]!.chunks[0]!.compressedOffset,
    });
    expect(lookupPath(with1.index, '.prefetch.landmark')).toBeDefined();
    const none = await open([lm], (off) => [reg('.no.prefetch.landmark', '\x0f', off[0]!)]);
    expect(none.index.prefetch).toEqual({ kind: 'none' });
    const deep = await open([lm], (off) => [reg('a/.prefetch.landmark', '\x0f', off[0]!)]);
    expect(deep.index.prefetch).toEqual({ kind: 'default' });
  });

  test('unknown JSON keys and __proto__ are ignored', async () => {
    const json = `{"version":1,"entries":[{"name":"a","type":"dir","__proto__":{"mode":1},"constructor":5,"NumLink":3,"endOffsetX":1}]}`;
    const { blob } = buildEStargz([], () => json);
    const index = await openLayer(new BufferRangeReader(blob));
    expect(lookupPath(index, 'a')!.mode).toBe(0);
  });
});

describe('hostile and malformed TOCs', () => {
  const cases: Array<[string, (off: number[]) => Entry[], string]> = [
    ['unknown type', () => [{ name: 'x', type: 'socket' }], 'E_BAD_TOC'],
    ['missing type', () => [{ name: 'x' }], 'E_BAD_TOC'],
    ['non-integer size', (o) => [{ ...reg('x', 'abcd', o[0]!), size: 1.5 }], 'E_BAD_TOC'],
    ['negative offset', (o) => [reg('x', 'abcd', o[0]!, { offset: -1 })], 'E_BAD_TOC'],
    ['string mode', () => [{ name: 'x', type: 'dir', mode: '0755' }], 'E_BAD_TOC'],
    ['bad digest', (o) => [reg('x', 'abcd', o[0]!, { chunkDigest: 'md5:abc' })], 'E_BAD_TOC'],
    ['no digest', (o) => [{ name: 'x', type: 'reg', size: 4, offset: o[0] }], 'E_BAD_TOC'],
    ['bad xattr base64', () => [{ name: 'x', type: 'dir', xattrs: { 'user.a': 'a b' } }], 'E_BAD_TOC'],
    ['unknown hardlink target', () => [{ name: 'x', type: 'hardlink', linkName: 'nope' }], 'E_BAD_TOC'],
    [
      'hardlink cycle',
      () => [
        { name: 'x', type: 'hardlink', linkName: 'y' },
        { name: 'y', type: 'hardlink', linkName: 'x' },
      ],
      'E_BAD_TOC',
    ],
    [
      'hardlink to a directory',
      () => [
        { name: 'd', type: 'dir' },
        { name: 'x', type: 'hardlink', linkName: 'd' },
      ],
      'E_BAD_TOC',
    ],
    [
      'chunk without a file',
      (o) => [{ name: 'x', type: 'chunk', offset: o[0], chunkDigest: sha256('abcd') }],
      'E_BAD_TOC',
    ],
    ['file under a file', (o) => [reg('f', 'abcd', o[0]!), { name: 'f/g', type: 'dir' }], 'E_BAD_TOC'],
    ['root as a file', (o) => [reg('./', 'abcd', o[0]!)], 'E_BAD_TOC'],
    ['offset beyond the data region', () => [reg('x', 'abcd', 100_000)], 'E_BAD_TOC'],
    [
      'chunk gap',
      (o) => [
        { name: 'x', type: 'reg', size: 8, offset: o[0], chunkSize: 4, chunkDigest: sha256('abcd') },
        { name: 'x', type: 'chunk', offset: o[1], chunkOffset: 5, chunkDigest: sha256('efgh') },
      ],
      'E_BAD_TOC',
    ],
    [
      'chunk overlap',
      (o) => [
        { name: 'x', type: 'reg', size: 8, offset: o[0], chunkSize: 4, chunkDigest: sha256('abcd') },
        { name: 'x', type: 'chunk', offset: o[1], chunkOffset: 3, chunkDigest: sha256('efgh') },
      ],
      'E_BAD_TOC',
    ],
    [
      'chunks short of the size',
      (o) => [
        { name: 'x', type: 'reg', size: 12, offset: o[0], chunkSize: 4, chunkDigest: sha256('abcd') },
        { name: 'x', type: 'chunk', offset: o[1], chunkOffset: 4, chunkSize: 4, chunkDigest: sha256('efgh') },
      ],
      'E_BAD_TOC',
    ],
    [
      'chunk past the size',
      (o) => [
        { name: 'x', type: 'reg', size: 6, offset: o[0], chunkSize: 4, chunkDigest: sha256('abcd') },
        { name: 'x', type: 'chunk', offset: o[1], chunkOffset: 4, chunkSize: 4, chunkDigest: sha256('efgh') },
      ],
      'E_BAD_TOC',
    ],
    [
      'chunks on an empty file',
      (o) => [
        { name: 'x', type: 'reg' },
        { name: 'x', type: 'chunk', offset: o[0], chunkDigest: sha256('abcd') },
      ],
      'E_BAD_TOC',
    ],
  ];
  for (const [title, entries, code] of cases) {
    test(title, async () => {
      const err = await failure(open([Buffer.from('abcd'), Buffer.from('efgh')], entries));
      expect(err.code).toBe(code);
    });
  }

  test('containers/storage style (endOffset): spans from the next chunk, descending offsets refused', async () => {
    const payloads = ['p1', 'p2', 'abcd', 'efgh', 'tail'].map((p) => Buffer.from(p));
    let seen: number[] = [];
    const cs = (o: number[], second: number) => {
      seen = o;
      return [
        {
          name: 'x',
          type: 'reg',
          size: 8,
          offset: o[2],
          endOffset: o[4],
          chunkSize: 4,
          chunkDigest: sha256('abcd'),
        },
        {
          name: 'x',
          type: 'chunk',
          offset: second,
          chunkOffset: 4,
          chunkSize: 4,
          chunkDigest: sha256('efgh'),
        },
      ];
    };
    const ok = await open(payloads, (o) => cs(o, o[3]!));
    const x = lookupPath(ok.index, 'x')!;
    expect(x.chunks.map((c) => [c.compressedOffset, c.compressedEnd])).toEqual([
      [seen[2], seen[3]],
      [seen[3], seen[4]],
    ]);
    expect((await readFileRange(ok.reader, ok.index, x, 0, 8)).toString()).toBe('abcdefgh');
    // the second chunk starting before the first one leaves the first with an empty span
    expect((await failure(open(payloads, (o) => cs(o, o[1]!)))).code).toBe('E_BAD_TOC');
  });

  test('a huge hostile chunk list is refused (typed, no hang)', async () => {
    const n = 100_000;
    const err = await failure(
      open([Buffer.from('abcd')], () => [
        { name: 'x', type: 'reg', size: n, offset: 5, endOffset: 9, chunkSize: 1, chunkDigest: sha256('a') },
        ...Array.from({ length: n - 1 }, (_, i) => ({
          name: 'x',
          type: 'chunk',
          offset: n - i, // descending
          chunkOffset: i + 1,
          chunkSize: 1,
          chunkDigest: sha256('a'),
        })),
      ]),
    );
    expect(err.code).toBe('E_BAD_TOC');
  });

  test('entry cap: E_TOO_MANY_ENTRIES', async () => {
    const entries = () => Array.from({ length: 50 }, (_, i) => ({ name: `d${i}`, type: 'dir' }));
    await expect(open([], entries, { maxEntries: 50 })).resolves.toBeDefined();
    expect((await failure(open([], entries, { maxEntries: 49 }))).code).toBe('E_TOO_MANY_ENTRIES');
  });

  test('TOC size cap: E_TOC_TOO_LARGE (also for a gzip bomb)', async () => {
    const entries = () => Array.from({ length: 50 }, (_, i) => ({ name: `d${i}`, type: 'dir' }));
    expect((await failure(open([], entries, { maxTocBytes: 1000 }))).code).toBe('E_TOC_TOO_LARGE');
    // 64 MiB of spaces compress to ~64 KiB: refused while inflating, not after
    const bomb = tocMember(`{"entries":[]${' '.repeat(64 * 1024 * 1024)}}`);
    const blob = Buffer.concat([bomb, estargzFooterBytes(0)]);
    const err = await failure(openLayer(new BufferRangeReader(blob), { maxTocBytes: 1024 * 1024 }));
    expect(err.code).toBe('E_TOC_TOO_LARGE');
  });

  test('TOC tar entry must be stargz.index.json; JSON must be an object with an entries array', async () => {
    const wrongName = Buffer.concat([tocMember('{"entries":[]}', 'other.json'), estargzFooterBytes(0)]);
    expect((await failure(openLayer(new BufferRangeReader(wrongName)))).code).toBe('E_BAD_TOC');
    for (const json of [
      'not json',
      '[]',
      '{"entries":{}}',
      '{"entries":[1]}',
      '{"version":"1","entries":[]}',
    ]) {
      const blob = Buffer.concat([tocMember(json), estargzFooterBytes(0)]);
      expect((await failure(openLayer(new BufferRangeReader(blob)))).code, json).toBe('E_BAD_TOC');
    }
    const empty = Buffer.concat([tocMember('{"version":1,"entries":null}'), estargzFooterBytes(0)]);
    const index = await openLayer(new BufferRangeReader(empty));
    expect(index.root).toMatchObject({ type: 'dir', mode: 0o755, nlink: 2 });
    expect(index.nodes.length).toBe(2);
  });

  test('bytes after the TOC member are not interpreted (no multistream)', async () => {
    const { blob, tocOffset } = buildEStargz([], () => ({ entries: [{ name: 'a', type: 'dir' }] }));
    const member = blob.subarray(tocOffset, blob.length - 51);
    const trailing = tocMember('{"entries":[{"name":"evil","type":"dir"}]}');
    const withTrail = Buffer.concat([member, trailing, estargzFooterBytes(0)]);
    const index = await openLayer(new BufferRangeReader(withTrail));
    expect(lookupPath(index, 'a')).toBeDefined();
    expect(lookupPath(index, 'evil')).toBeUndefined();
  });
});
