/**
 * The streaming TOC pipeline (toc-scan.ts, toc-reader.ts): entries cut correctly wherever the
 * decompressed stream is split, the entry cap refusing a huge TOC after reading only a bounded
 * prefix of it, a 500k-entry TOC opening into the right tree, and an unverified TOC that cannot
 * be used before verify().
 */
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, test, vi } from 'vitest';
import { lookupPath, type LayerIndex } from '../../src/format/model.js';
import { openLayer, readLayerToc } from '../../src/format/open-layer.js';
import { TocScanner } from '../../src/format/toc-scan.js';
import { warmUpTocPipeline } from '../../src/format/toc-reader.js';
import { UnverifiedToc } from '../../src/format/unverified-toc.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildEStargz, buildZstdChunked, estargzFooterBytes, tocMember } from '../helpers/format-builders.js';
import { failure, sha256 } from '../helpers/format-fixtures.js';

/** Feed `json` to a scanner cut at `cuts`; return every entry it handed out, in order. */
function scanIn(json: Buffer, cuts: number[], maxEntries = 1e6): { entries: unknown[]; top: unknown } {
  const entries: unknown[] = [];
  const scanner = new TocScanner(maxEntries, (raw, first) => {
    expect(first).toBe(entries.length);
    entries.push(...raw);
  });
  let at = 0;
  for (const cut of [...cuts].sort((a, b) => a - b)) {
    if (cut <= at || cut >= json.length) continue;
    scanner.push(json.subarray(at, cut));
    at = cut;
  }
  scanner.push(json.subarray(at));
  return { entries, top: scanner.end() };
}

describe('TocScanner', () => {
  // strings with quotes, backslashes, braces and brackets inside; unicode; odd whitespace;
  // top-level keys before and after the entries; nested values in entries and at the top
  const makeDoc = (filler: number): Buffer =>
    Buffer.from(
      ' {\n "Version" : 1 ,"junk":{"a":[1,{"b":"}]"}],"c":null},\t"entries" : [\r\n' +
        [
          '{"name":"a\\"}b\\\\","type":"dir"}',
          '{ "name" : "ünï/文件\\u0041", "type":"reg","xattrs":{"user.x":"aGk="},"x":[[],[{}]]}',
          '{"name":"[{","type":"symlink","linkName":"\\\\\\""}',
          // entry separators inside a string: a fast cut there must not parse
          '{"name":"x},{\\"y},{","type":"reg"}',
          ...Array.from({ length: filler }, (_, i) => `{"name":"d/f${i}","type":"reg","size":0}`),
        ].join(' ,\n') +
        ' ] , "tarSplitDigest":"sha256:' +
        'ab'.repeat(32) +
        '" }\n',
    );
  const expectedTop = (count: number) => ({
    version: 1,
    tarSplitDigest: 'sha256:' + 'ab'.repeat(32),
    entriesKind: 'array',
    count,
  });

  test('entries and top-level fields equal JSON.parse, wherever the bytes are cut', () => {
    const doc = makeDoc(10);
    const whole = JSON.parse(doc.toString()) as { entries: unknown[] };
    // every single cut position (inside strings, escapes, keys, numbers, whitespace)
    for (let cut = 1; cut < doc.length; cut++) {
      const r = scanIn(doc, [cut]);
      expect(r.entries).toEqual(whole.entries);
      expect(r.top).toEqual(expectedTop(14));
    }
    // one byte at a time
    const bytes = scanIn(
      doc,
      Array.from({ length: doc.length }, (_, i) => i),
    );
    expect(bytes.entries).toEqual(whole.entries);
  });

  test('several batches (over 64 KB) survive random cuts', () => {
    const doc = makeDoc(6000);
    expect(doc.length).toBeGreaterThan(200_000);
    const whole = JSON.parse(doc.toString()) as { entries: unknown[] };
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: doc.length - 1 }), { maxLength: 60 }), (cuts) => {
        const r = scanIn(doc, cuts);
        expect(r.entries).toEqual(whole.entries);
        expect(r.top).toEqual(expectedTop(6004));
      }),
      { numRuns: 25 },
    );
  });

  test('an indented TOC (the Go eStargz writer uses tabs) is cut with one parse per piece', () => {
    const entries = Array.from({ length: 500 }, (_, i) => ({
      name: `usr/lib/f${i}`,
      type: 'reg',
      size: i,
      xattrs: { 'user.a': 'eA==' },
    }));
    const doc = Buffer.from(JSON.stringify({ version: 1, entries }, null, '\t'));
    expect(doc.length).toBeGreaterThan(40_000);
    expect(doc.length).toBeLessThan(64 * 1024);
    const batches: number[] = [];
    const scanner = new TocScanner(1e6, (raw) => batches.push(raw.length));
    scanner.push(doc);
    expect(scanner.end()).toMatchObject({ count: 500 });
    // the fast cut takes all but the last entry at once (the exact scan would stop at each entry)
    expect(batches).toEqual([499, 1]);
    // and cut anywhere, the entries are the same
    const r = scanIn(doc, [1000, 20_000, 40_001]);
    expect(r.entries).toEqual(entries);
  });

  test('a large piece is parsed in texts V8 keeps in the young generation (under 128 KiB each)', () => {
    const entries = Array.from({ length: 4000 }, (_, i) => ({
      name: `usr/share/doc/package-${i}/changelog.Debian.gz`,
      type: 'reg',
      size: i * 7,
      digest: `sha256:${i.toString(16).padStart(64, '0')}`,
    }));
    const doc = Buffer.from(JSON.stringify({ version: 1, entries }));
    expect(doc.length).toBeGreaterThan(512 * 1024);
    const texts: number[] = [];
    const parse = JSON.parse;
    const spy = vi
      .spyOn(JSON, 'parse')
      .mockImplementation((text: string, reviver?: Parameters<typeof parse>[1]) => {
        texts.push(text.length);
        return parse(text, reviver) as unknown;
      });
    let batches = 0;
    try {
      const scanner = new TocScanner(1e6, () => batches++);
      scanner.push(doc);
      expect(scanner.end()).toMatchObject({ count: 4000 });
    } finally {
      spy.mockRestore();
    }
    expect(batches).toBeGreaterThan(8);
    expect(Math.max(...texts)).toBeLessThan(128 * 1024);
    expect(scanIn(doc, [100_000, 300_001]).entries).toEqual(entries);
  });

  test('malformed documents are E_BAD_TOC wherever they are cut', () => {
    for (const text of [
      '',
      '[]',
      '{"entries":[{"name":"a"},]}',
      '{"entries":[{"name":"a"} {"name":"b"}]}',
      '{"entries":[{"name":"a"}],}',
      '{"entries":[{"name":"a",}]}',
      '{"entries":[]} x',
      '{"entries":[] ',
      '{"entries":[1]}',
      '{"entries":{}}',
      '{"entries":[],"entries":[]}',
      '{"version":tru,"entries":[]}',
      '{"entries":[{"name":"' + '['.repeat(10) + '"}' + ']'.repeat(3) + '}]}',
      '{"entries":[{"name":"a"},{"name":"b"' + '}'.repeat(2) + ',{"name":"c"}]}',
    ]) {
      const json = Buffer.from(text);
      for (const cut of [1, Math.floor(json.length / 2), json.length - 1]) {
        let err: unknown;
        try {
          scanIn(json, [cut]);
        } catch (e) {
          err = e;
        }
        expect(err, text).toMatchObject({ code: 'E_BAD_TOC' });
      }
    }
  });

  test('the entry cap is enforced on counting, before the entries are parsed', () => {
    // entry 6 is not even valid JSON: the cap (5) must fire first
    const json = Buffer.from(
      '{"entries":[' +
        Array.from({ length: 5 }, () => '{"name":"a","type":"dir"}').join(',') +
        ',{"name":nope}]}',
    );
    let parsed = 0;
    const scanner = new TocScanner(5, (raw) => (parsed += raw.length));
    expect(() => scanner.push(json)).toThrow(expect.objectContaining({ code: 'E_TOO_MANY_ENTRIES' }));
    expect(parsed).toBeLessThanOrEqual(5);
  });
});

/** `n` tiny directory entries, ~28 bytes each: highly compressible, like the hostile TOC of issue 10. */
function tinyEntries(n: number): Buffer {
  const one = '{"name":"a/b","type":"dir"},';
  return Buffer.from(`{"version":1,"entries":[${one.repeat(n - 1)}{"name":"a/b","type":"dir"}]}`);
}

describe('entry cap on huge TOCs', () => {
  const n = 400_000;
  const json = tinyEntries(n); // ~11 MB of JSON, a few tens of KB compressed
  const cap = 1000;

  test('eStargz: refused with E_TOO_MANY_ENTRIES after reading a bounded prefix', async () => {
    const blob = Buffer.concat([tocMember(json), estargzFooterBytes(0)]);
    expect(blob.length).toBeLessThan(json.length / 50);
    const err = await failure(
      openLayer(new BufferRangeReader(blob), { maxEntries: cap, expectedTocDigest: sha256(json) }),
    );
    expect(err.code).toBe('E_TOO_MANY_ENTRIES');
    expect(err.context.limit).toBe(cap);
    // the cap fired within the first decompressed windows, not after materialising the TOC
    const read = Number(err.context.jsonBytesRead);
    expect(read).toBeGreaterThan(cap * 28);
    expect(read).toBeLessThanOrEqual(512 * 1024);
    expect(read).toBeLessThan(json.length / 20);
  });

  test('zstd:chunked: refused the same way', async () => {
    const { blob, manifestOffset, compressedManifest } = buildZstdChunked([Buffer.from('x')], () =>
      json.toString(),
    );
    expect(compressedManifest.length).toBeLessThan(json.length / 50);
    const err = await failure(
      openLayer(new BufferRangeReader(blob), { maxEntries: cap, tocOffsetHint: manifestOffset }),
    );
    expect(err.code).toBe('E_TOO_MANY_ENTRIES');
    expect(Number(err.context.jsonBytesRead)).toBeLessThanOrEqual(512 * 1024);
  });

  test('under the cap the same TOC opens (duplicates merge into one directory)', async () => {
    const blob = Buffer.concat([tocMember(json), estargzFooterBytes(0)]);
    const index = await openLayer(new BufferRangeReader(blob), {
      maxEntries: n,
      expectedTocDigest: sha256(json),
    });
    expect(index.nodes.length - 1).toBe(3); // root, a, a/b
    expect(lookupPath(index, 'a/b')).toMatchObject({ type: 'dir', nlink: 2 });
  });
});

describe('a 500,000-entry TOC', () => {
  test('opens into the complete tree', async () => {
    const dirs = 5000;
    const perDir = 99; // + the directory entry = 100 per directory
    const parts: string[] = [];
    for (let d = 0; d < dirs; d++) {
      parts.push(`{"name":"./usr/d${d}/","type":"dir","mode":493}`);
      for (let f = 0; f < perDir; f++) {
        parts.push(
          f % 33 === 0
            ? `{"name":"./usr/d${d}/l${f}","type":"symlink","linkName":"f${f + 1}"}`
            : `{"name":"./usr/d${d}/f${f}","type":"reg","mode":420,"uid":${f % 3}}`,
        );
      }
    }
    expect(parts.length).toBe(500_000);
    const json = Buffer.from(`{"version":1,"entries":[${parts.join(',')}]}`);
    const blob = Buffer.concat([tocMember(json), estargzFooterBytes(0)]);
    const index = await openLayer(new BufferRangeReader(blob), {
      expectedTocDigest: sha256(json),
      maxEntries: 500_000,
    });
    // root + usr + 500k entries
    expect(index.nodes.length - 1).toBe(500_002);
    const usr = lookupPath(index, 'usr')!;
    expect(usr).toMatchObject({ type: 'dir', nlink: 2 + dirs, mode: 0o755 });
    expect(usr.children!.size).toBe(dirs);
    const d = lookupPath(index, 'usr/d4321')!;
    expect(d.children!.size).toBe(perDir);
    expect(lookupPath(index, 'usr/d4321/f98')).toMatchObject({ type: 'reg', mode: 0o644, uid: 2, size: 0 });
    expect(lookupPath(index, 'usr/d0/l33')).toMatchObject({ type: 'symlink', linkName: 'f34' });
    // ids are dense and index the nodes
    for (const i of [1, 2, 250_000, 500_002]) expect(index.nodes[i]!.id).toBe(i);
  });
});

describe('an unverified TOC', () => {
  const { blob, json } = buildEStargz([Buffer.from('hello')], (off) => ({
    version: 1,
    entries: [
      {
        name: 'f',
        type: 'reg',
        size: 5,
        offset: off[0],
        digest: sha256('hello'),
        chunkDigest: sha256('hello'),
      },
    ],
  }));

  test('is not a LayerIndex until verified', async () => {
    const toc = await readLayerToc(new BufferRangeReader(blob));
    expect(toc).toBeInstanceOf(UnverifiedToc);
    // @ts-expect-error an UnverifiedToc has no tree: it cannot be used as an index
    const asIndex: LayerIndex = toc;
    expect(asIndex.root).toBeUndefined();
    expect('nodes' in toc).toBe(false);
    expect(toc.tocJsonDigest).toBe(sha256(json));

    expect(() => toc.verify(sha256('other'))).toThrow(
      expect.objectContaining({ code: 'E_TOC_DIGEST_MISMATCH' }),
    );
    const index = toc.verify(sha256(json));
    expect(lookupPath(index, 'f')).toMatchObject({ type: 'reg', size: 5 });
  });

  test('openLayer verifies against the expected digest, once, and refuses another', async () => {
    const err = await failure(openLayer(new BufferRangeReader(blob), { expectedTocDigest: sha256('x') }));
    expect(err.code).toBe('E_TOC_DIGEST_MISMATCH');
    expect((await openLayer(new BufferRangeReader(blob), { expectedTocDigest: sha256(json) })).format).toBe(
      'estargz',
    );
  });

  test('content that does not parse AND is not the promised TOC reports the digest mismatch', async () => {
    const bad = Buffer.from('{"entries":[{"name":"x","type":"socket"}]}');
    const badBlob = Buffer.concat([tocMember(bad), estargzFooterBytes(0)]);
    const mismatch = await failure(
      openLayer(new BufferRangeReader(badBlob), { expectedTocDigest: sha256('x') }),
    );
    expect(mismatch.code).toBe('E_TOC_DIGEST_MISMATCH');
    // with the right digest (or none) the parse error itself is reported
    const parse = await failure(
      openLayer(new BufferRangeReader(badBlob), { expectedTocDigest: sha256(bad) }),
    );
    expect(parse.code).toBe('E_BAD_TOC');
    expect((await failure(openLayer(new BufferRangeReader(badBlob)))).code).toBe('E_BAD_TOC');
  });

  test('gzip members still end at their trailer; a bomb is cut at the size cap', async () => {
    const bomb = gzipSync(Buffer.alloc(32 << 20, 0x20));
    const blob2 = Buffer.concat([bomb, estargzFooterBytes(0)]);
    const err = await failure(openLayer(new BufferRangeReader(blob2), { maxTocBytes: 1 << 20 }));
    expect(err.code).toMatch(/^E_(BAD_TOC|TOC_TOO_LARGE)$/);
  });
});

describe('warmUpTocPipeline', () => {
  test('its synthetic TOC passes the real scanner, entry checks and tree (the store runs it before mounting)', async () => {
    // a rejected synthetic TOC would make every store start fail: the pipeline's checks must accept it
    await expect(warmUpTocPipeline()).resolves.toBeUndefined();
  });
});
