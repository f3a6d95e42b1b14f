import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, linkSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { goJson, goQuote } from '../../src/format/writer/go-json.js';
import { Crc64Iso } from '../../src/format/writer/tar-split.js';
import { buildLayerBuffer } from '../../src/format/writer/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { lookupPath } from '../../src/format/model.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { terminateCodec } from '../../src/format/codec.js';

const work = mkdtempSync(join(tmpdir(), 'writer-enc-'));
afterAll(async () => {
  await terminateCodec();
  rmSync(work, { recursive: true, force: true });
});

describe('Go-compatible JSON', () => {
  it('escapes like encoding/json with HTML escaping (documented Go behaviour)', () => {
    expect(goQuote('<a href="x">&</a>')).toBe('"\\u003ca href=\\"x\\"\\u003e\\u0026\\u003c/a\\u003e"');
    expect(goQuote('tab\tnl\ncr\rbs\\')).toBe('"tab\\tnl\\ncr\\rbs\\\\"');
    expect(goQuote('\u0001\u001f\u007f')).toBe('"\\u0001\\u001f\u007f"');
    expect(goQuote('\u2028\u2029')).toBe('"\\u2028\\u2029"');
    expect(goQuote('ünïcødé-文件-😀')).toBe('"ünïcødé-文件-😀"');
    expect(goQuote('bad\ud800x')).toBe('"bad\\ufffdx"');
  });

  it('MarshalIndent layout, omitted undefined fields, sorted map keys', () => {
    const v = {
      version: 1,
      entries: [
        {
          name: 'a',
          size: undefined,
          xattrs: new Map([
            ['b', 'x'],
            ['B', 'y'],
            ['a', 'z'],
          ]),
        },
      ],
      empty: [],
      none: new Map(),
    };
    expect(goJson(v, '\t')).toBe(
      '{\n\t"version": 1,\n\t"entries": [\n\t\t{\n\t\t\t"name": "a",\n\t\t\t"xattrs": {\n\t\t\t\t"B": "y",\n' +
        '\t\t\t\t"a": "z",\n\t\t\t\t"b": "x"\n\t\t\t}\n\t\t}\n\t],\n\t"empty": [],\n\t"none": {}\n}',
    );
    expect(goJson(v)).toBe(
      '{"version":1,"entries":[{"name":"a","xattrs":{"B":"y","a":"z","b":"x"}}],"empty":[],"none":{}}',
    );
    // whatever we emit is valid JSON
    expect(JSON.parse(goJson(v, '\t'))).toMatchObject({ version: 1 });
  });
});

describe('CRC-64/GO-ISO (tar-split file checksums)', () => {
  it('matches the catalogue check value and is incremental', () => {
    expect(new Crc64Iso().update(Buffer.from('123456789')).digest().toString('hex')).toBe('b90956c775a41001');
    expect(new Crc64Iso().digest().toString('hex')).toBe('0000000000000000');
    const data = Buffer.from('The quick brown fox jumps over the lazy dog, again and again.');
    const whole = new Crc64Iso().update(data).digest();
    for (const cut of [1, 7, 8, 9, 33]) {
      expect(new Crc64Iso().update(data.subarray(0, cut)).update(data.subarray(cut)).digest()).toEqual(whole);
    }
  });
});

describe('inputs written by GNU tar', () => {
  function gnuTar(args: string[], dir: string): Buffer {
    return execFileSync('tar', [...args, '-C', dir, '-cf', '-', '.'], { maxBuffer: 1 << 30 });
  }

  it('POSIX format: atime/ctime PAX records survive re-encoding, hardlinks and contents round-trip', async () => {
    const dir = join(work, 'posix');
    mkdirSync(join(dir, 'sub'), { recursive: true });
    writeFileSync(join(dir, 'sub', 'a.txt'), 'alpha\n');
    linkSync(join(dir, 'sub', 'a.txt'), join(dir, 'hard'));
    writeFileSync(join(dir, 'big'), Buffer.alloc(300_000, 'x'));
    const tar = gnuTar(['--format=posix', '--sort=name'], dir);
    for (const format of ['estargz', 'zstd:chunked'] as const) {
      const r = await buildLayerBuffer(tar, { format, chunkSize: 100_000 });
      const index = await openLayer(new BufferRangeReader(r.blob));
      expect(lookupPath(index, 'hard')).toBe(lookupPath(index, 'sub/a.txt'));
      const big = lookupPath(index, 'big')!;
      const got = await readFileRange(new BufferRangeReader(r.blob), index, big, 0, big.size);
      expect(got.equals(Buffer.alloc(300_000, 'x'))).toBe(true);
      // python's tarfile reads our output back: the PAX atime/ctime GNU tar wrote are still there
      const plainPath = join(work, 'plain.tar');
      writeFileSync(
        plainPath,
        execFileSync(format === 'estargz' ? 'gzip' : 'zstd', ['-dc'], { input: r.blob, maxBuffer: 1 << 30 }),
      );
      const py = execFileSync('python3', [
        '-c',
        'import tarfile,sys,json\n' +
          't=tarfile.open(sys.argv[1])\n' +
          'print(json.dumps({m.name: sorted(k for k in m.pax_headers) for m in t.getmembers()}))',
        plainPath,
      ]).toString();
      const pax = JSON.parse(py) as Record<string, string[]>;
      expect(pax['./sub/a.txt']).toEqual(expect.arrayContaining(['atime', 'ctime']));
      if (format === 'zstd:chunked') {
        const m =
          r.annotations['io.github.containers.zstd-chunked.manifest-position']!.split(':').map(Number);
        const manifest = JSON.parse(
          execFileSync('zstd', ['-dc'], { input: r.blob.subarray(m[0]!, m[0]! + m[1]!) }).toString(),
        ) as { entries: { name: string; accesstime?: string; changetime?: string }[] };
        const a = manifest.entries.find((e) => e.name === './sub/a.txt')!;
        expect(a.accesstime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
        expect(a.changetime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
      }
    }
  });

  it('sparse files (GNU and POSIX sparse) are rejected with E_UNSUPPORTED_FORMAT', async () => {
    const dir = join(work, 'sparse');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'holey'), 'data');
    truncateSync(join(dir, 'holey'), 8 << 20);
    for (const fmt of ['--format=gnu', '--format=posix']) {
      const tar = gnuTar([fmt, '--sparse'], dir);
      await expect(buildLayerBuffer(tar, { format: 'estargz' })).rejects.toMatchObject({
        code: 'E_UNSUPPORTED_FORMAT',
      });
    }
  });

  it('GNU format long names and links round-trip', async () => {
    const dir = join(work, 'gnu');
    const long = 'L'.repeat(120);
    mkdirSync(join(dir, long), { recursive: true });
    writeFileSync(join(dir, long, long + '.txt'), 'long\n');
    execFileSync('ln', ['-s', join(long, long + '.txt'), join(dir, 'lnk')]);
    const tar = gnuTar(['--format=gnu'], dir);
    const r = await buildLayerBuffer(tar, { format: 'estargz' });
    const index = await openLayer(new BufferRangeReader(r.blob));
    const f = lookupPath(index, `${long}/${long}.txt`)!;
    expect((await readFileRange(new BufferRangeReader(r.blob), index, f, 0, 10)).toString()).toBe('long\n');
    expect(lookupPath(index, 'lnk')!.linkName).toBe(`${long}/${long}.txt`);
    // GNU tar reads our re-encoded (PAX) headers back to the same names
    const list = execFileSync('tar', ['-tz'], { input: r.blob, maxBuffer: 1 << 30 }).toString();
    expect(list).toContain(`./${long}/${long}.txt`);
    expect(readFileSync(join(dir, long, long + '.txt'), 'utf8')).toBe('long\n');
  });
});

describe('failures', () => {
  it('a failing input stream is E_IO and the output stream is destroyed', async () => {
    const { Readable, PassThrough } = await import('node:stream');
    const { buildLayer } = await import('../../src/format/writer/index.js');
    const src = new Readable({
      read() {
        this.destroy(new Error('network went away'));
      },
    });
    const out = new PassThrough();
    await expect(buildLayer(src, out, { format: 'zstd:chunked' })).rejects.toMatchObject({ code: 'E_IO' });
    expect(out.destroyed).toBe(true);
  });

  it('buildLayerToFile removes its partial output on a bad tar; out-of-range mtimes are rejected', async () => {
    const { buildLayerToFile } = await import('../../src/format/writer/index.js');
    const { existsSync } = await import('node:fs');
    // a valid header with a base-256 mtime far beyond year 9999, written by python's tarfile (GNU format)
    const tarPath = join(work, 'far-future.tar');
    execFileSync('python3', [
      '-c',
      'import tarfile,io,sys\n' +
        't=tarfile.open(sys.argv[1],"w",format=tarfile.GNU_FORMAT)\n' +
        'ti=tarfile.TarInfo("x"); ti.size=1; ti.mtime=10**13\n' +
        't.addfile(ti, io.BytesIO(b"x")); t.close()',
      tarPath,
    ]);
    const outPath = join(work, 'far-future.out');
    await expect(buildLayerToFile(tarPath, outPath, { format: 'estargz' })).rejects.toMatchObject({
      code: 'E_BAD_ARCHIVE',
    });
    expect(existsSync(outPath)).toBe(false);
  });
});
