import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, linkSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildLayerBuffer } from '../../src/format/writer/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { lookupPath } from '../../src/format/model.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';

// Inputs written by real GNU tar and python's tarfile, outputs checked with gzip/zstd/tar/python3.
const work = mkdtempSync(join(tmpdir(), 'writer-enc-'));
afterAll(async () => {
  rmSync(work, { recursive: true, force: true });
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
