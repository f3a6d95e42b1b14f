import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  createReadStream,
  createWriteStream,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { lookupPath, type LayerIndex, type TreeNode } from '../../src/format/model.js';
import {
  buildLayer,
  buildLayerBuffer,
  buildLayerToFile,
  type BuildOptions,
} from '../../src/format/writer/index.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { StoreError } from '../../src/util/errors.js';

/**
 * Round trip: a tar written by Python's tarfile (independent of our code) -> our writer -> our
 * reader (openLayer + readFileRange) must give back exactly the tree described by SPEC.
 */

const work = mkdtempSync(join(tmpdir(), 'writer-rt-'));
afterAll(async () => {
  rmSync(work, { recursive: true, force: true });
});

const CHUNK = 64 * 1024;
const T = 1577934245; // 2020-01-02T03:04:05Z

/** Deterministic pseudo-random bytes (xorshift), so runs are reproducible. */
function prng(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

interface SpecEntry {
  name: string;
  type: 'dir' | 'reg' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo';
  mode: number;
  uid?: number;
  gid?: number;
  uname?: string;
  gname?: string;
  mtime?: number;
  content?: Buffer;
  link?: string;
  devmajor?: number;
  devminor?: number;
  /** xattr values as raw bytes (PAX input only). */
  xattrs?: Record<string, Buffer>;
}

const longName = 'dir/' + 'n'.repeat(150) + '.txt';
const deepDirs = Array.from(
  { length: 6 },
  (_, i) => 'deep/' + Array.from({ length: i + 1 }, (_, j) => `d${j}`.padEnd(50, 'x')).join('/') + '/',
);
const deepFile = deepDirs[deepDirs.length - 1] + 'file.txt';
const zerosFile = Buffer.concat([
  Buffer.alloc(CHUNK),
  prng(CHUNK, 7),
  Buffer.alloc(2 * CHUNK),
  Buffer.alloc(1000),
]);

const SPEC: SpecEntry[] = [
  { name: 'dir/', type: 'dir', mode: 0o755, mtime: T },
  {
    name: 'dir/hello.txt',
    type: 'reg',
    mode: 0o644,
    uid: 1000,
    gid: 1001,
    uname: 'alice',
    gname: 'staff',
    mtime: T,
    content: Buffer.from('hello world\n'),
    xattrs: {
      'user.comment': Buffer.from('hi there'),
      'security.capability': Buffer.from([0x01, 0x00, 0x00, 0x02, 0xff, 0xfe, 0x80, 0x00]),
    },
  },
  { name: 'dir/setuid', type: 'reg', mode: 0o4755, mtime: T, content: prng(3000, 1) },
  { name: 'dir/setgid', type: 'reg', mode: 0o2711, mtime: T, content: prng(10, 2) },
  { name: 'dir/sticky/', type: 'dir', mode: 0o1777, mtime: T },
  { name: 'dir/link', type: 'symlink', mode: 0o777, mtime: T, link: 'hello.txt' },
  { name: 'abs-link', type: 'symlink', mode: 0o777, mtime: T, link: '/etc/passwd' },
  { name: 'dir/hard', type: 'hardlink', mode: 0o644, mtime: T, link: 'dir/hello.txt' },
  { name: 'dev/', type: 'dir', mode: 0o755, mtime: T },
  { name: 'dev/char', type: 'char', mode: 0o666, mtime: T, devmajor: 3, devminor: 1 },
  { name: 'dev/block', type: 'block', mode: 0o660, mtime: T, devmajor: 259, devminor: 70000 },
  { name: 'dev/fifo', type: 'fifo', mode: 0o644, mtime: T },
  { name: 'empty', type: 'reg', mode: 0o600, mtime: T, content: Buffer.alloc(0) },
  { name: 'exact', type: 'reg', mode: 0o644, mtime: T, content: prng(CHUNK, 3) },
  {
    name: 'big.bin',
    type: 'reg',
    mode: 0o644,
    mtime: T + 1,
    content: Buffer.concat([prng(3 * CHUNK, 4), Buffer.from('tail'.repeat(CHUNK / 8))]),
  },
  { name: 'zeros.bin', type: 'reg', mode: 0o644, mtime: T, content: zerosFile },
  { name: longName, type: 'reg', mode: 0o644, mtime: T, content: Buffer.from('long name\n') },
  ...deepDirs.map((d): SpecEntry => ({ name: d, type: 'dir', mode: 0o755, mtime: T })),
  { name: deepFile, type: 'reg', mode: 0o644, mtime: T, content: Buffer.from('deep\n') },
  { name: 'dir/ünïcødé-文件.txt', type: 'reg', mode: 0o644, mtime: T, content: Buffer.from('unicode\n') },
  { name: 'dir/a<b>&c', type: 'reg', mode: 0o644, mtime: T, content: Buffer.from('html\n') },
  { name: 'epoch', type: 'reg', mode: 0o644, mtime: 0, content: Buffer.from('epoch\n') },
  { name: 'future', type: 'reg', mode: 0o644, mtime: 9_999_999_999, content: Buffer.from('future\n') },
  {
    name: 'bigid',
    type: 'reg',
    mode: 0o640,
    uid: 3_000_000,
    gid: 3_000_001,
    mtime: T,
    content: Buffer.from('id\n'),
  },
  { name: 'dir/.wh.gone', type: 'reg', mode: 0o644, mtime: T, content: Buffer.alloc(0) },
];

const PY = `
import base64, json, sys, tarfile, io
spec = json.load(sys.stdin)
fmt = {'pax': tarfile.PAX_FORMAT, 'gnu': tarfile.GNU_FORMAT}[sys.argv[2]]
types = {'dir': tarfile.DIRTYPE, 'reg': tarfile.REGTYPE, 'symlink': tarfile.SYMTYPE, 'hardlink': tarfile.LNKTYPE,
         'char': tarfile.CHRTYPE, 'block': tarfile.BLKTYPE, 'fifo': tarfile.FIFOTYPE}
with tarfile.open(sys.argv[1], 'w', format=fmt) as t:
    for e in spec:
        ti = tarfile.TarInfo(e['prefix'] + e['name'])
        ti.type = types[e['type']]
        ti.mode = e['mode']; ti.mtime = e.get('mtime', 0)
        ti.uid = e.get('uid', 0); ti.gid = e.get('gid', 0)
        ti.uname = e.get('uname', ''); ti.gname = e.get('gname', '')
        if 'link' in e: ti.linkname = (e['prefix'] if e['type'] == 'hardlink' else '') + e['link']
        ti.devmajor = e.get('devmajor', 0); ti.devminor = e.get('devminor', 0)
        if 'xattrs' in e and fmt == tarfile.PAX_FORMAT:
            ti.pax_headers = {'SCHILY.xattr.' + k: base64.b64decode(v).decode('utf-8', 'surrogateescape') for k, v in e['xattrs'].items()}
        data = base64.b64decode(e.get('content', ''))
        ti.size = len(data) if e['type'] == 'reg' else 0
        t.addfile(ti, io.BytesIO(data) if ti.size else None)
`;

/** Write SPEC (optionally with extra entries) as a tar using Python's tarfile. */
function pythonTar(format: 'pax' | 'gnu', prefix = '', spec: SpecEntry[] = SPEC): Buffer {
  const script = join(work, 'mk.py');
  writeFileSync(script, PY);
  const out = join(work, `in-${format}-${Math.random().toString(36).slice(2)}.tar`);
  const json = JSON.stringify(
    spec.map((e) => ({
      ...e,
      prefix,
      content: e.content?.toString('base64'),
      xattrs: e.xattrs
        ? Object.fromEntries(Object.entries(e.xattrs).map(([k, v]) => [k, v.toString('base64')]))
        : undefined,
    })),
  );
  execFileSync('python3', [script, out, format], { input: json });
  return readFileSync(out);
}

const sha = (b: Buffer | string): string => 'sha256:' + createHash('sha256').update(b).digest('hex');
const strip = (n: string): string => n.replace(/\/$/, '');
const TYPE_OF: Record<SpecEntry['type'], TreeNode['type']> = {
  dir: 'dir',
  reg: 'reg',
  symlink: 'symlink',
  hardlink: 'reg',
  char: 'char',
  block: 'block',
  fifo: 'fifo',
};

async function checkTree(
  blob: Buffer,
  index: LayerIndex,
  opts: { xattrs: boolean; format: string },
): Promise<void> {
  const reader = new BufferRangeReader(blob);
  for (const e of SPEC) {
    const node = lookupPath(index, strip(e.name));
    expect(node, e.name).toBeDefined();
    const n = node!;
    const target = e.type === 'hardlink' ? SPEC.find((s) => s.name === e.link)! : e;
    expect(n.type, e.name).toBe(TYPE_OF[e.type]);
    expect(n.mode, e.name).toBe(target.mode & 0o7777);
    expect(n.uid, e.name).toBe(target.uid ?? 0);
    expect(n.gid, e.name).toBe(target.gid ?? 0);
    expect(n.uname ?? '', e.name).toBe(target.uname ?? '');
    expect(n.gname ?? '', e.name).toBe(target.gname ?? '');
    expect(n.mtime, e.name).toBe(target.mtime ?? 0);
    if (e.type === 'symlink') expect(n.linkName).toBe(e.link);
    if (e.type === 'char' || e.type === 'block') {
      expect([n.devMajor, n.devMinor], e.name).toEqual([e.devmajor, e.devminor]);
    }
    if (opts.xattrs && target.xattrs) {
      expect([...n.xattrs.keys()].sort()).toEqual(Object.keys(target.xattrs).sort());
      for (const [k, v] of Object.entries(target.xattrs))
        expect(n.xattrs.get(k)?.equals(v), `${e.name} ${k}`).toBe(true);
    } else if (e.type !== 'hardlink') {
      expect(n.xattrs.size, e.name).toBe(0);
    }
    if (target.type === 'reg') {
      const content = target.content!;
      expect(n.size, e.name).toBe(content.length);
      const all = await readFileRange(reader, index, n, 0, content.length + 10);
      expect(all.equals(content), `${e.name} (${opts.format})`).toBe(true);
      // ranges crossing chunk boundaries
      for (const [off, len] of [
        [1, 5],
        [CHUNK - 3, 10],
        [2 * CHUNK - 1, CHUNK + 2],
        [content.length - 1, 5],
      ] as const) {
        if (off < 0 || off >= content.length) continue;
        const part = await readFileRange(reader, index, n, off, len);
        expect(part.equals(content.subarray(off, off + len)), `${e.name}@${off}`).toBe(true);
      }
    }
  }
  // hardlinks share the node
  expect(lookupPath(index, 'dir/hard')).toBe(lookupPath(index, 'dir/hello.txt'));
  expect(lookupPath(index, 'dir/hello.txt')!.nlink).toBe(2);
}

describe.each(['estargz', 'zstd:chunked'] as const)('round trip %s', (format) => {
  const opts: BuildOptions = { format, chunkSize: CHUNK };

  it.each(['pax', 'gnu'] as const)('tree, contents and metadata survive (%s input)', async (inFmt) => {
    const tar = pythonTar(inFmt);
    const r = await buildLayerBuffer(tar, opts);
    const index = await openLayer(new BufferRangeReader(r.blob), { expectedTocDigest: r.tocDigest });
    expect(index.format).toBe(format);
    expect(index.tocDigest).toBe(r.tocDigest);
    expect(index.tocJsonDigest).toBe(r.tocJsonDigest);
    expect(r.blobDigest).toBe(sha(r.blob));
    expect(r.size).toBe(r.blob.length);
    await checkTree(r.blob, index, { xattrs: inFmt === 'pax', format });
    const big = lookupPath(index, 'big.bin')!;
    expect(big.chunks.length).toBe(4);
    expect(lookupPath(index, 'exact')!.chunks.length).toBe(1);
  });

  it('names with a ./ prefix are the same entries', async () => {
    const r = await buildLayerBuffer(pythonTar('pax', './'), opts);
    const index = await openLayer(new BufferRangeReader(r.blob));
    await checkTree(r.blob, index, { xattrs: true, format });
  });

  it('is deterministic: same input and options give identical bytes', async () => {
    const tar = pythonTar('pax');
    const a = await buildLayerBuffer(tar, { ...opts, concurrency: 1 });
    const b = await buildLayerBuffer(tar, { ...opts, concurrency: 6 });
    expect(a.blob.equals(b.blob)).toBe(true);
    expect(a.tocDigest).toBe(b.tocDigest);
  });

  it('buffer, stream (gzip/zstd input) and file builds agree', async () => {
    const tar = pythonTar('pax');
    const ref = await buildLayerBuffer(tar, opts);
    const tarPath = join(work, `plain-${format.replace(':', '_')}.tar`);
    writeFileSync(tarPath, tar);
    const gz = execFileSync('gzip', ['-c', tarPath], { maxBuffer: 1 << 30 });
    const zs = execFileSync('zstd', ['-c', '-q', tarPath], { maxBuffer: 1 << 30 });
    // gzip'd input via the buffer API
    expect((await buildLayerBuffer(gz, opts)).blobDigest).toBe(ref.blobDigest);
    // streams, in small pieces
    for (const input of [tar, gz, zs]) {
      const pieces = Array.from({ length: Math.ceil(input.length / 7777) }, (_, i) =>
        input.subarray(i * 7777, (i + 1) * 7777),
      );
      const outPath = join(work, 'stream.out');
      const res = await buildLayer(Readable.from(pieces), createWriteStream(outPath), opts);
      expect(res.blobDigest).toBe(ref.blobDigest);
      expect(sha(readFileSync(outPath))).toBe(ref.blobDigest);
    }
    // file API, plain and compressed
    for (const [p, data] of [
      [tarPath, tar],
      [tarPath + '.zst', zs],
    ] as const) {
      writeFileSync(p, data);
      const outPath = join(work, 'file.out');
      const res = await buildLayerToFile(p, outPath, opts);
      expect(res.blobDigest).toBe(ref.blobDigest);
      expect(sha(readFileSync(outPath))).toBe(ref.blobDigest);
    }
    // a ReadableStream straight from disk too
    const res2 = await buildLayer(createReadStream(tarPath), createWriteStream(join(work, 'rs.out')), opts);
    expect(res2.blobDigest).toBe(ref.blobDigest);
  });

  it('prioritized files (with parents and hardlink targets) come first, then .prefetch.landmark', async () => {
    const r = await buildLayerBuffer(pythonTar('pax'), { ...opts, prioritize: ['dir/hard', 'big.bin'] });
    const index = await openLayer(new BufferRangeReader(r.blob));
    const order = index.nodes.slice(2).map((n) => n.path);
    // first TOC nodes: dir, its hardlink target, then big.bin, then the landmark
    expect(order.slice(0, 4)).toEqual(['dir', 'dir/hello.txt', 'big.bin', '.prefetch.landmark']);
    expect(index.prefetch.kind).toBe('landmark');
    const end = (index.prefetch as { end: number }).end;
    for (const p of ['dir/hello.txt', 'big.bin']) {
      for (const c of lookupPath(index, p)!.chunks) expect(c.compressedOffset).toBeLessThan(end);
    }
    for (const p of ['exact', 'dir/setuid', 'zeros.bin']) {
      for (const c of lookupPath(index, p)!.chunks) expect(c.compressedOffset).toBeGreaterThanOrEqual(end);
    }
    await checkTree(r.blob, index, { xattrs: true, format });
    await expect(
      buildLayerBuffer(pythonTar('pax'), { ...opts, prioritize: ['no/such/file'] }),
    ).rejects.toMatchObject({
      code: 'E_NOT_FOUND',
    });
  });

  it('drops existing landmarks and stargz.index.json, keeps the last of repeated names', async () => {
    const spec: SpecEntry[] = [
      { name: 'a.txt', type: 'reg', mode: 0o644, content: Buffer.from('first') },
      { name: '.prefetch.landmark', type: 'reg', mode: 0o644, content: Buffer.from([0x0f]) },
      { name: 'stargz.index.json', type: 'reg', mode: 0o644, content: Buffer.from('{}') },
      { name: 'b.txt', type: 'reg', mode: 0o644, content: Buffer.from('b') },
      { name: './a.txt', type: 'reg', mode: 0o600, content: Buffer.from('second!') },
    ];
    const r = await buildLayerBuffer(pythonTar('pax', '', spec), opts);
    const index = await openLayer(new BufferRangeReader(r.blob));
    const paths = index.nodes.slice(2).map((n) => n.path);
    if (format === 'estargz') {
      expect(paths).toEqual(['.no.prefetch.landmark', 'b.txt', 'a.txt']);
      expect(index.prefetch).toEqual({ kind: 'none' });
    } else {
      expect(paths).toEqual(['b.txt', 'a.txt']);
      expect(index.prefetch).toEqual({ kind: 'default' });
    }
    const a = lookupPath(index, 'a.txt')!;
    expect(a.mode).toBe(0o600);
    expect((await readFileRange(new BufferRangeReader(r.blob), index, a, 0, 100)).toString()).toBe('second!');
  });

  it('rejects bad input with typed errors', async () => {
    const tar = pythonTar('pax');
    await expect(buildLayerBuffer(tar.subarray(0, 700), opts)).rejects.toMatchObject({ code: 'E_TRUNCATED' });
    const corrupt = Buffer.from(tar);
    corrupt[10] = corrupt[10]! ^ 0x55; // name byte of the first header: checksum no longer matches
    await expect(buildLayerBuffer(corrupt, opts)).rejects.toMatchObject({ code: 'E_BAD_ARCHIVE' });
    await expect(buildLayerBuffer(Buffer.from([0x1f, 0x8b, 0x08, 0, 1, 2, 3]), opts)).rejects.toBeInstanceOf(
      StoreError,
    );
    await expect(buildLayerBuffer(tar, { ...opts, chunkSize: 0 })).rejects.toMatchObject({
      code: 'E_INVALID_ARGUMENT',
    });
  });
});

describe('format-level properties checked with independent tools', () => {
  it('eStargz: gzip -dc gives a tar listing the entries, the landmark and stargz.index.json', async () => {
    const r = await buildLayerBuffer(pythonTar('pax'), { format: 'estargz', chunkSize: CHUNK });
    const p = join(work, 'l.gz');
    writeFileSync(p, r.blob);
    const plain = execFileSync('gzip', ['-dc', p], { maxBuffer: 1 << 30 });
    expect(sha(plain)).toBe(r.diffID);
    expect(plain.length).toBe(r.uncompressedSize);
    expect(r.annotations['io.containers.estargz.uncompressed-size']).toBe(String(plain.length));
    const list = execFileSync('tar', ['-t'], { input: plain, maxBuffer: 1 << 30 })
      .toString()
      .split('\n');
    expect(list).toContain('stargz.index.json');
    expect(list).toContain('.no.prefetch.landmark');
    expect(list).toContain(longName);
    expect(list).toContain(deepFile);
    const toc = JSON.parse(
      execFileSync('tar', ['-xO', 'stargz.index.json'], { input: plain }).toString(),
    ) as {
      entries: { name: string; type: string; chunkSize?: number; offset?: number; modtime?: string }[];
    };
    expect(sha(execFileSync('tar', ['-xO', 'stargz.index.json'], { input: plain }))).toBe(r.tocDigest);
    const big = toc.entries.filter((e) => e.name === 'big.bin');
    expect(big.map((e) => e.type)).toEqual(['reg', 'chunk', 'chunk', 'chunk']);
    expect(big.map((e) => e.chunkSize)).toEqual([CHUNK, CHUNK, CHUNK, undefined]);
    expect(toc.entries.find((e) => e.name === 'exact')!.chunkSize).toBe(CHUNK);
    expect(toc.entries.find((e) => e.name === 'epoch')!.modtime).toBeUndefined();
    expect(toc.entries.find((e) => e.name === 'future')!.modtime).toBe('2286-11-20T17:46:39Z');
    // extracted content equals the input
    expect(
      execFileSync('tar', ['-xO', 'big.bin'], { input: plain, maxBuffer: 1 << 30 }).equals(
        SPEC.find((e) => e.name === 'big.bin')!.content!,
      ),
    ).toBe(true);
    // footer: 51 bytes, hex TOC offset
    const footer = r.blob.subarray(r.blob.length - 51);
    expect(footer.subarray(0, 16).toString('hex')).toBe('1f8b08040000000000ff1a0053471600');
    expect(parseInt(footer.subarray(16, 32).toString('latin1'), 16)).toBe(r.tocOffset);
    expect(footer.subarray(32, 38).toString('latin1')).toBe('STARGZ');
  });

  it('zstd:chunked: zstd -dc gives the full tar (with EOF); footer, manifest, tar-split and annotations agree', async () => {
    const r = await buildLayerBuffer(pythonTar('pax'), { format: 'zstd:chunked', chunkSize: CHUNK });
    const p = join(work, 'l.zst');
    writeFileSync(p, r.blob);
    const plain = execFileSync('zstd', ['-dc', '-q', p], { maxBuffer: 1 << 30 });
    expect(sha(plain)).toBe(r.diffID);
    expect(plain.length).toBe(r.uncompressedSize);
    expect(plain.subarray(plain.length - 1024).every((b) => b === 0)).toBe(true);
    const list = execFileSync('tar', ['-t'], { input: plain, maxBuffer: 1 << 30 })
      .toString()
      .trim()
      .split('\n');
    expect(list).toEqual(SPEC.map((e) => e.name));
    expect(
      execFileSync('tar', ['-xO', 'zeros.bin'], { input: plain, maxBuffer: 1 << 30 }).equals(zerosFile),
    ).toBe(true);
    // footer: skippable frame, 64-byte payload, GNUlInUx
    const f = r.blob.subarray(r.blob.length - 72);
    expect(f.subarray(0, 8).toString('hex')).toBe('502a4d1840000000');
    expect(f.subarray(64).toString('latin1')).toBe('GNUlInUx');
    const u64 = (i: number): number => Number(f.readBigUInt64LE(8 + i * 8));
    const [mOff, mLen, mRaw, type, tsOff, tsLen, tsRaw] = [0, 1, 2, 3, 4, 5, 6].map(u64) as number[];
    expect(type).toBe(1);
    expect(r.annotations['io.github.containers.zstd-chunked.manifest-position']).toBe(
      `${mOff}:${mLen}:${mRaw}:1`,
    );
    expect(r.annotations['io.github.containers.zstd-chunked.tarsplit-position']).toBe(
      `${tsOff}:${tsLen}:${tsRaw}`,
    );
    expect(r.blob.readUInt32LE(mOff! - 8)).toBe(0x184d2a50);
    const manifestC = r.blob.subarray(mOff!, mOff! + mLen!);
    expect(sha(manifestC)).toBe(r.tocDigest);
    expect(r.annotations['io.github.containers.zstd-chunked.manifest-checksum']).toBe(r.tocDigest);
    const manifest = execFileSync('zstd', ['-dc', '-q'], { input: manifestC });
    expect(manifest.length).toBe(mRaw);
    const toc = JSON.parse(manifest.toString()) as {
      tarSplitDigest: string;
      entries: { name: string; type: string; mode?: number; chunkType?: string; chunkSize?: number }[];
    };
    const tsC = r.blob.subarray(tsOff!, tsOff! + tsLen!);
    expect(toc.tarSplitDigest).toBe(sha(tsC));
    expect(toc.entries.find((e) => e.name === 'dir/setuid')!.mode).toBe(0o104755);
    expect(toc.entries.find((e) => e.name === 'dir/link')!.mode).toBe(0o120777);
    expect(toc.entries.find((e) => e.name === 'dev/fifo')!.mode).toBe(0o010644);
    const zeroEntries = toc.entries.filter((e) => e.name === 'zeros.bin');
    expect(zeroEntries.map((e) => e.chunkType)).toEqual(['zeros', undefined, 'zeros', 'zeros', 'zeros']);
    // tar-split: JSON lines whose raw segments + file payloads rebuild the tar byte for byte
    const lines = execFileSync('zstd', ['-dc', '-q'], { input: tsC }).toString().trim().split('\n');
    expect(lines.length).toBeGreaterThan(SPEC.length);
    const rebuilt: Buffer[] = [];
    let pos = 0;
    for (const line of lines) {
      const e = JSON.parse(line) as {
        type: number;
        name?: string;
        size?: number;
        payload: string | null;
        position: number;
      };
      expect(e.position).toBe(pos++);
      if (e.type === 2) rebuilt.push(Buffer.from(e.payload!, 'base64'));
      else if ((e.size ?? 0) > 0) {
        const content = execFileSync('tar', ['-xO', e.name!], { input: plain, maxBuffer: 1 << 30 });
        expect(content.length).toBe(e.size);
        expect(e.payload).not.toBeNull();
        rebuilt.push(content);
      } else {
        expect(e.payload).toBeNull();
      }
    }
    expect(sha(Buffer.concat(rebuilt))).toBe(r.diffID);
  });

  it('zstd:chunked zeros chunks are flagged and read back as zeros', async () => {
    const r = await buildLayerBuffer(pythonTar('pax'), { format: 'zstd:chunked', chunkSize: CHUNK });
    const index = await openLayer(new BufferRangeReader(r.blob));
    const node = lookupPath(index, 'zeros.bin')!;
    expect(node.chunks.map((c) => c.zeros ?? false)).toEqual([true, false, true, true, true]);
    const data = await readFileRange(new BufferRangeReader(r.blob), index, node, 0, node.size);
    expect(data.equals(zerosFile)).toBe(true);
  });

  it('random content round-trips through both formats at odd chunk sizes', async () => {
    for (const chunkSize of [1, 511, 4097]) {
      const content = randomBytes(9000);
      const spec: SpecEntry[] = [{ name: 'f', type: 'reg', mode: 0o644, content }];
      for (const format of ['estargz', 'zstd:chunked'] as const) {
        const r = await buildLayerBuffer(pythonTar('pax', '', spec), { format, chunkSize });
        const index = await openLayer(new BufferRangeReader(r.blob));
        const node = lookupPath(index, 'f')!;
        expect(node.chunks.length).toBe(Math.ceil(9000 / chunkSize));
        const got = await readFileRange(new BufferRangeReader(r.blob), index, node, 0, 9000);
        expect(got.equals(content)).toBe(true);
      }
    }
  });
});
