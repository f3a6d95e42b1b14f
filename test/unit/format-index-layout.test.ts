/**
 * The compact in-memory layout of a parsed TOC (index-chunk.ts, index-node.ts,
 * sorted-children.ts): what it saves must not change what the tree answers.
 */
import { createHash } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { digestKey, IndexChunk, isSha256, packDigest, unpackDigest } from '../../src/format/index-chunk.js';
import { IndexNode, MetaTable } from '../../src/format/index-node.js';
import { lookupPath, type Chunk, type TreeNode } from '../../src/format/model.js';
import { SortedChildren } from '../../src/format/sorted-children.js';
import { buildTree } from '../../src/format/toc-tree.js';
import { parseEntry } from '../../src/format/toc.js';

const sha = (s: string) => 'sha256:' + createHash('sha256').update(s).digest('hex');

describe('packed chunk digests', () => {
  test('a canonical sha256 digest packs to 32 characters and back', () => {
    for (const d of [sha('a'), sha(''), 'sha256:' + '0'.repeat(64), 'sha256:' + 'f'.repeat(64)]) {
      const packed = packDigest(d);
      expect(packed).toHaveLength(32);
      expect(unpackDigest(packed)).toBe(d);
    }
  });

  test('anything else is kept as it is', () => {
    for (const d of [
      'sha256:' + 'A'.repeat(64), // uppercase is not canonical: it must not come back lowercased
      'sha256:' + 'g'.repeat(64),
      'sha512:' + 'a'.repeat(64),
      'sha256:' + 'a'.repeat(63),
      'sha256:../../x',
    ]) {
      expect(packDigest(d)).toBe(d);
      expect(unpackDigest(packDigest(d))).toBe(d);
    }
  });

  test('isSha256 accepts exactly the canonical form, and remembered packings never mix digests up', () => {
    const a = sha('a');
    const b = sha('b');
    const c = sha('c');
    // interleaved past the two remembered results, repeats and rejects in between
    for (const d of [a, b, a, c, b, 'sha256:' + 'A'.repeat(64), a, c, c, b]) {
      const expected = /^sha256:[0-9a-f]{64}$/.test(d);
      expect(isSha256(d)).toBe(expected);
      const packed = packDigest(d);
      expect(unpackDigest(packed)).toBe(d);
      if (expected) expect(Buffer.from(packed, 'latin1').toString('hex')).toBe(d.slice(7));
    }
    expect(isSha256('sha256:' + 'a'.repeat(63))).toBe(false);
    expect(isSha256('a'.repeat(32))).toBe(false); // as long as a packed digest
  });

  test('an IndexChunk answers its digest spelled out, and digestKey agrees with plain chunks', () => {
    const plain: Chunk = {
      fileOffset: 0,
      size: 5,
      compressedOffset: 10,
      compressedEnd: 20,
      innerOffset: 0,
      digest: sha('hello'),
    };
    const c = IndexChunk.from(plain);
    expect(c.digest).toBe(sha('hello'));
    expect(c).toMatchObject({ ...plain, zeros: undefined });
    expect(digestKey(c)).toBe(digestKey(plain));
    expect(digestKey(c)).not.toBe(digestKey({ ...plain, digest: sha('other') }));
    c.digest = sha('other');
    expect(c.digest).toBe(sha('other'));
  });

  test('zeros is told by the empty compressed span, and the two must agree', () => {
    const base = { fileOffset: 0, size: 8, compressedOffset: 10, innerOffset: 0, digest: sha('z') };
    expect(IndexChunk.from({ ...base, compressedEnd: 10, zeros: true }).zeros).toBe(true);
    expect(IndexChunk.from({ ...base, compressedEnd: 11 }).zeros).toBeUndefined();
    expect(() => IndexChunk.from({ ...base, compressedEnd: 10 })).toThrow(RangeError);
    expect(() => IndexChunk.from({ ...base, compressedEnd: 11, zeros: true })).toThrow(RangeError);
  });

  test('offsets past 2^30 survive', () => {
    const big = 2 ** 40 + 3;
    const c = IndexChunk.from({
      fileOffset: big,
      size: 1,
      compressedOffset: big,
      compressedEnd: big + 7,
      innerOffset: 0,
      digest: sha('x'),
    });
    expect([c.fileOffset, c.compressedOffset, c.compressedEnd]).toEqual([big, big, big + 7]);
  });
});

describe('nodes', () => {
  test('equal attributes share one interned record, different ones do not', () => {
    const metas = new MetaTable();
    const a = metas.get('reg', 0o644, 1, 2, 'u', undefined, 5);
    expect(a).toMatchObject({
      type: 'reg',
      mode: 0o644,
      uid: 1,
      gid: 2,
      uname: 'u',
      gname: undefined,
      mtime: 5,
    });
    expect(metas.get('reg', 0o644, 1, 2, 'u', undefined, 5)).toBe(a);
    expect(metas.get('reg', 0o600, 1, 2, 'u', undefined, 5)).not.toBe(a);
    expect(metas.get('dir', 0o644, 1, 2, 'u', undefined, 5)).not.toBe(a);
    expect(metas.get('reg', 0o644, 1, 2, 'u', '', 5)).not.toBe(a); // an empty name is not an absent one
    expect(metas.get('reg', 0o644, 1, 2, 'u', undefined, 2 ** 33 + 5)).not.toBe(a); // same low 32 bits
    expect(metas.get('reg', 0o644, 1, 2, 'u', undefined, 5)).toBe(a);
  });

  test('a path is spelled from the parents; a one-chunk file gives its chunk and digest', () => {
    const metas = new MetaTable();
    const dir = (type: 'dir' | 'reg') => metas.get(type, 0, 0, 0, undefined, undefined, 0);
    const root = new IndexNode('', undefined, dir('dir'));
    const a = new IndexNode('a', root, dir('dir'));
    const f = new IndexNode('f.txt', a, dir('reg'));
    expect([root.path, a.path, f.path]).toEqual(['', 'a', 'a/f.txt']);
    const plain: Chunk = {
      fileOffset: 0,
      size: 3,
      compressedOffset: 0,
      compressedEnd: 9,
      innerOffset: 0,
      digest: sha('abc'),
    };
    const chunk = IndexChunk.from(plain);
    f.size = 3;
    f.setContent([chunk], sha('abc'), true);
    // a one-chunk file keeps the chunk's fields, not the chunk: equal, not the same, each time
    expect(f.chunks).toHaveLength(1);
    expect(f.chunks[0]).toMatchObject(plain);
    expect(f.chunks[0]).not.toBe(f.chunks[0]);
    f.chunks[0]!.compressedEnd = 99;
    expect(f.chunks[0]!.compressedEnd).toBe(9);
    expect(f.digest).toBe(sha('abc'));
    f.setContent([chunk], sha('whole'), false);
    expect(f.digest).toBe(sha('whole'));
    expect(f.chunks[0]!.digest).toBe(sha('abc'));
    // an open end is closed in the node itself
    f.setContent([IndexChunk.from({ ...plain, compressedEnd: -1 })], undefined, false);
    expect(f.digest).toBeUndefined();
    f.closeOpenEnds(-1, (c) => c.compressedOffset + 5);
    expect(f.chunks[0]!.compressedEnd).toBe(5);
    // several chunks are kept as they are
    const halves = [
      IndexChunk.from({ ...plain, size: 1, compressedEnd: -1 }),
      IndexChunk.from({ ...plain, fileOffset: 1, size: 2, compressedOffset: 4, compressedEnd: 8 }),
    ];
    f.setContent(halves, undefined, false);
    expect(f.chunks).toBe(halves);
    f.closeOpenEnds(-1, () => 4);
    expect(halves.map((c) => c.compressedEnd)).toEqual([4, 8]);
    f.setContent([], undefined, false);
    expect([f.chunks, f.digest, f.children]).toEqual([[], undefined, undefined]);
    expect(() => f.setChild('x', root)).toThrow(TypeError);
  });
});

describe('sorted children', () => {
  test('lookups, membership and sorted iteration, from an unsorted map', () => {
    const node = (name: string) => ({ name }) as unknown as TreeNode;
    const names = ['zeta', 'alpha', 'Mid', 'beta', '\u00e9t\u00e9', 'a'];
    const kids = SortedChildren.from(new Map(names.map((n) => [n, node(n)])));
    expect(kids.size).toBe(names.length);
    expect([...kids.keys()]).toEqual([...names].sort());
    for (const n of names) {
      expect(kids.get(n)?.name).toBe(n);
      expect(kids.has(n)).toBe(true);
    }
    expect(kids.get('gamma')).toBeUndefined();
    expect(kids.has('')).toBe(false);
    expect([...kids].map(([n, v]) => [n, v.name])).toEqual([...names].sort().map((n) => [n, n]));
    expect([...kids.values()].map((v) => v.name)).toEqual([...names].sort());
    const seen: string[] = [];
    kids.forEach((_, n) => seen.push(n));
    expect(seen).toEqual([...names].sort());
    expect(SortedChildren.from(new Map()).get('x')).toBeUndefined();
    expect(() => kids.trySet('zz', node('zz'))).toThrow(TypeError);
  });

  test('while building: names in order are appended, known ones replaced, others refused', () => {
    const node = (name: string) => ({ name }) as unknown as TreeNode;
    const kids = new SortedChildren();
    for (const n of ['a', 'b', 'd']) expect(kids.trySet(n, node(n))).toBe(true);
    const b2 = node('b2');
    expect(kids.trySet('b', b2)).toBe(true);
    expect(kids.get('b')).toBe(b2);
    expect(kids.trySet('c', node('c'))).toBe(false);
    expect(kids.has('c')).toBe(false);
    kids.fix();
    expect([...kids.keys()]).toEqual(['a', 'b', 'd']);
    expect(() => kids.trySet('e', node('e'))).toThrow(TypeError);
  });

  test('a directory whose names arrive out of order is a Map until it is fixed', () => {
    const metas = new MetaTable();
    const meta = (type: 'dir' | 'reg') => metas.get(type, 0, 0, 0, undefined, undefined, 0);
    const dir = new IndexNode('', undefined, meta('dir'));
    const files = ['m', 'z', 'a', 'q'].map((n) => new IndexNode(n, dir, meta('reg')));
    for (const f of files) dir.setChild(f.name, f);
    expect(dir.children).toBeInstanceOf(Map);
    dir.fixChildren();
    expect(dir.children).toBeInstanceOf(SortedChildren);
    expect([...dir.children!.keys()]).toEqual(['a', 'm', 'q', 'z']);
    expect(dir.children!.get('q')).toBe(files[3]);
    expect(() => dir.setChild('b', files[0]!)).toThrow(TypeError);
  });

  test('a parsed tree answers the same through its compact form', async () => {
    const raw = [
      { name: 'z/', type: 'dir', mode: 0o755 },
      { name: 'z/b.txt', type: 'reg', size: 1, digest: sha('b'), offset: 10, mode: 0o644, uid: 7 },
      { name: 'a.txt', type: 'reg', size: 1, digest: sha('a'), offset: 0, mode: 0o644, uid: 7 },
      { name: 'z/a-long-name-over-13.txt', type: 'symlink', linkName: 'b.txt', mode: 0o777 },
      { name: 'z/hard', type: 'hardlink', linkName: 'z/b.txt' },
    ];
    const entries = raw.map((r, i) => parseEntry(r, i));
    const { root, nodes } = await buildTree(entries, { dataEnd: 20 });
    const index = { root } as Parameters<typeof lookupPath>[0];
    expect([...root.children!.keys()]).toEqual(['a.txt', 'z']);
    expect([...lookupPath(index, 'z')!.children!.keys()]).toEqual([
      'a-long-name-over-13.txt',
      'b.txt',
      'hard',
    ]);
    const b = lookupPath(index, 'z/b.txt')!;
    expect(lookupPath(index, 'z/hard')).toBe(b);
    expect(b).toMatchObject({ path: 'z/b.txt', nlink: 2, uid: 7, mode: 0o644, digest: sha('b') });
    expect(b.chunks.map((c) => [c.compressedOffset, c.compressedEnd, c.digest])).toEqual([
      [10, 20, sha('b')],
    ]);
    expect(lookupPath(index, 'a.txt')!.chunks[0]).toMatchObject({ compressedEnd: 10, digest: sha('a') });
    expect(lookupPath(index, 'z/a-long-name-over-13.txt')).toMatchObject({
      type: 'symlink',
      linkName: 'b.txt',
      path: 'z/a-long-name-over-13.txt',
    });
    // two files with the same attributes share them
    expect((b as IndexNode).meta).toBe((lookupPath(index, 'a.txt') as IndexNode).meta);
    expect(nodes.slice(1).map((n) => n.path)).toEqual([
      '',
      'z',
      'z/b.txt',
      'a.txt',
      'z/a-long-name-over-13.txt',
    ]);
  });
});
