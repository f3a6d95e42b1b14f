import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildLayerBuffer } from '../../src/format/writer/index.js';

/**
 * The Go vectors (../shared/vectors) were built from a known input tar. We recreate that input
 * with Python's tarfile (an independent tar writer) and compare our output with the Go output
 * wherever the formats promise equality: the decompressed data stream (tar headers re-encoded the
 * way Go archive/tar does), the TOC JSON serialisation (digest equal once the compressed offsets,
 * which depend on the deflate implementation, are mapped to Go's), member structure and footer.
 */

const VECTORS = `${SHARED}/vectors`;
const work = mkdtempSync(join(tmpdir(), 'writer-vectors-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const PY = `
import tarfile, io, sys
T = 1577934245
with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as t:
    def add(name, typ, mode, data=b'', **kw):
        ti = tarfile.TarInfo(name)
        ti.type = typ; ti.mode = mode; ti.mtime = T
        ti.uname = kw.get('uname', ''); ti.gname = kw.get('gname', '')
        ti.uid = kw.get('uid', 0); ti.gid = kw.get('gid', 0)
        if 'link' in kw: ti.linkname = kw['link']
        if 'pax' in kw: ti.pax_headers = kw['pax']
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data) if data else None)
    add('foo/', tarfile.DIRTYPE, 0o755)
    add('foo/bar.txt', tarfile.REGTYPE, 0o644, b'hello\\n', uid=1000, gid=1000, uname='user', gname='group', pax={'SCHILY.xattr.user.k': 'v'})
    add('foo/big.bin', tarfile.REGTYPE, 0o600, b'0123456789')
    add('foo/link', tarfile.SYMTYPE, 0o777, link='bar.txt')
    add('foo/hard', tarfile.LNKTYPE, 0o644, link='foo/bar.txt')
    add('foo/.wh.gone', tarfile.REGTYPE, 0o644)
    add('empty', tarfile.REGTYPE, 0o644)
`;
import { SHARED } from '../helpers/shared.js';

function vectorInputTar(): Buffer {
  const script = join(work, 'mk.py');
  const out = join(work, 'input.tar');
  writeFileSync(script, PY);
  execFileSync('python3', [script, out]);
  return readFileSync(out);
}

function gunzipAll(blob: Buffer): Buffer {
  const p = join(work, `g-${Math.random().toString(36).slice(2)}.gz`);
  writeFileSync(p, blob);
  return execFileSync('gzip', ['-dc', p], { maxBuffer: 1 << 30 });
}

/** Uncompressed length of every gzip member, in order (Python zlib, independent of Node's). */
function memberSizes(blob: Buffer): number[] {
  const p = join(work, `m-${Math.random().toString(36).slice(2)}.gz`);
  writeFileSync(p, blob);
  const py =
    'import zlib,sys\n' +
    'd=open(sys.argv[1],"rb").read()\n' +
    'out=[]\n' +
    'while d:\n' +
    '  o=zlib.decompressobj(31)\n' +
    '  out.append(len(o.decompress(d)))\n' +
    '  d=o.unused_data\n' +
    'print(",".join(map(str,out)))';
  return execFileSync('python3', ['-c', py, p]).toString().trim().split(',').map(Number);
}

const sha = (b: Buffer | string): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

describe('eStargz writer vs Go vector A', () => {
  const vecA = readFileSync(join(VECTORS, 'vector-a-estargz-gzip9-chunk4-prio.blob'));
  const goPlain = gunzipAll(vecA);

  it('the vector file is the documented one', () => {
    expect(sha(vecA)).toBe('sha256:59c15cc76210c1e6c19cf7a0cc66939f34be750873747e20bc8f1576529b97cb');
    expect(sha(goPlain)).toBe('sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618');
  });

  it('decompressed data stream equals Go byte for byte; TOC JSON equals Go once offsets are mapped', async () => {
    const r = await buildLayerBuffer(vectorInputTar(), {
      format: 'estargz',
      chunkSize: 4,
      prioritize: ['foo/bar.txt'],
      gzipLevel: 9,
    });
    const ours = gunzipAll(r.blob);
    // 6656 = data part (members before the TOC member): 2048+4+1020+1024+4+4+2552
    expect(ours.subarray(0, 6656).equals(goPlain.subarray(0, 6656))).toBe(true);
    const tarList = execFileSync('tar', ['-t'], { input: ours }).toString().trim().split('\n');
    expect(tarList).toEqual([
      'foo/',
      'foo/bar.txt',
      '.prefetch.landmark',
      'foo/big.bin',
      'foo/link',
      'foo/hard',
      'foo/.wh.gone',
      'empty',
      'stargz.index.json',
    ]);
    const ourJson = execFileSync('tar', ['-xO', 'stargz.index.json'], { input: ours }).toString();
    expect(sha(ourJson)).toBe(r.tocDigest);
    expect(r.diffID).toBe(sha(ours));
    expect(r.uncompressedSize).toBe(ours.length);
    const goOffsets = [211, 244, 338, 442, 475, 508];
    let i = 0;
    const mapped = ourJson.replace(/"offset": \d+/g, () => `"offset": ${goOffsets[i++]}`);
    expect(i).toBe(6);
    expect(sha(mapped)).toBe('sha256:eb0ed4f2b5a8333488f5b25c8441ac95d1232a96b9e6b034eae0341622392376');
    // Same member structure as Go (uncompressed length of each gzip member, split by Python zlib).
    expect(memberSizes(r.blob)).toEqual([2048, 4, 1020, 1024, 4, 4, 2552, 4096, 0]);
    expect(memberSizes(vecA)).toEqual([2048, 4, 1020, 1024, 4, 4, 2552, 4096, 0]);
    // gzip header as Go writes it: MTIME 0, XFL 2 (level 9), OS 0xff
    expect(r.blob.subarray(0, 10).toString('hex')).toBe('1f8b08000000000002ff');
    // footer: same bytes as Go's except the TOC offset digits
    const footer = r.blob.subarray(r.blob.length - 51);
    const goFooter = vecA.subarray(vecA.length - 51);
    expect(footer.subarray(0, 16).equals(goFooter.subarray(0, 16))).toBe(true);
    expect(footer.subarray(32).equals(goFooter.subarray(32))).toBe(true);
    expect(parseInt(footer.subarray(16, 32).toString('latin1'), 16)).toBe(r.tocOffset);
  });
});
