/**
 * `stargz-store layer inspect|cat|build`, run as a real process from a fresh compile of the
 * project (tsc into a temp dir, so a concurrent `npm run build` elsewhere does not interfere).
 * Integration: needs a full compile and GNU tar.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { loadBlob, run, SAMPLES_TINY, sha256, VECTOR_A, VECTOR_B } from '../helpers/format-fixtures.js';

const ROOT = resolve(import.meta.dirname, '../..');
let work: string;
let mainJs: string;

interface Result {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

function cli(args: string[]): Promise<Result> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [mainJs, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.on('close', (code) =>
      resolvePromise({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() }),
    );
  });
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'cli-layer-'));
  // compiled output must resolve packages from the project's node_modules
  await symlink(join(ROOT, 'node_modules'), join(work, 'node_modules'));
  await writeFile(join(work, 'package.json'), '{"type":"module"}\n');
  const outDir = join(work, 'dist');
  // a compile with type errors fails the suite (it used to pass as long as tsc emitted main.js)
  const diagnostics: Buffer[] = [];
  const code = await new Promise<number | null>((done, fail) => {
    const tsc = spawn(
      process.execPath,
      [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', outDir],
      {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    tsc.stdout.on('data', (d: Buffer) => diagnostics.push(d));
    tsc.stderr.on('data', (d: Buffer) => diagnostics.push(d));
    tsc.on('error', fail);
    tsc.on('close', done);
  });
  if (code !== 0) throw new Error(`tsc exited with ${code}:\n${Buffer.concat(diagnostics).toString()}`);
  mainJs = join(outDir, 'src/cli/main.js');
  await stat(mainJs); // fails loudly if the compile produced nothing
}, 300_000);

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('layer inspect', () => {
  test('vector A: format, digests, offsets, prefetch and a deterministic entry list', async () => {
    const r = await cli(['layer', 'inspect', VECTOR_A]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const json = JSON.parse(r.stdout.toString());
    expect(json).toMatchObject({
      format: 'estargz',
      tocDigest: 'sha256:eb0ed4f2b5a8333488f5b25c8441ac95d1232a96b9e6b034eae0341622392376',
      tocJsonDigest: 'sha256:eb0ed4f2b5a8333488f5b25c8441ac95d1232a96b9e6b034eae0341622392376',
      tocOffset: 675,
      blobSize: 1563,
      prefetch: { kind: 'landmark', end: 338 },
    });
    expect(json.manifestChecksum).toBeUndefined();
    const names = (json.entries as Array<{ name: string }>).map((e) => e.name);
    expect(names).toEqual([
      '',
      '.prefetch.landmark',
      'empty',
      'foo',
      'foo/.wh.gone',
      'foo/bar.txt',
      'foo/big.bin',
      'foo/hard',
      'foo/link',
    ]);
    const byName = new Map((json.entries as Array<Record<string, unknown>>).map((e) => [e.name, e]));
    expect(byName.get('foo/bar.txt')).toMatchObject({
      type: 'reg',
      size: 6,
      mode: 0o644,
      uid: 1000,
      gid: 1000,
      uname: 'user',
      gname: 'group',
      mtime: Date.UTC(2020, 0, 2, 3, 4, 5) / 1000,
      xattrs: { 'user.k': 'dg==' },
      nlink: 2,
    });
    expect((byName.get('foo/bar.txt')!.chunks as unknown[]).length).toBe(2);
    expect(byName.get('foo/hard')).toMatchObject({ type: 'hardlink', linkName: 'foo/bar.txt' });
    expect(byName.get('foo/link')).toMatchObject({ type: 'symlink', linkName: 'bar.txt' });
    expect(byName.get('foo')).toMatchObject({ type: 'dir', mode: 0o755, nlink: 2 });
    expect(byName.get('foo/big.bin')).toMatchObject({
      mode: 0o600,
      devMajor: 0,
      devMinor: 0,
      digest: sha256('0123456789'),
    });
  });

  test('vector B: both digests, --toc-digest accepts either', async () => {
    const r = await cli(['layer', 'inspect', VECTOR_B]);
    expect(r.code).toBe(0);
    const json = JSON.parse(r.stdout.toString());
    expect(json).toMatchObject({
      format: 'zstd:chunked-legacy',
      tocDigest: 'sha256:609868a8d0f0b24f3b473a3ac6f50f32a98ecf36d8e466dff527e2223b051131',
      manifestChecksum: 'sha256:609868a8d0f0b24f3b473a3ac6f50f32a98ecf36d8e466dff527e2223b051131',
      tocJsonDigest: 'sha256:0a5d0b175bad3213eeb9a0d7731ac789af75a86469bf095ac0d44286aae9bc99',
      tocOffset: 649,
      prefetch: { kind: 'none' },
    });
    for (const d of [json.tocDigest, json.tocJsonDigest]) {
      expect((await cli(['layer', 'inspect', VECTOR_B, '--toc-digest', d])).code).toBe(0);
    }
  });

  test('a wrong --toc-digest exits 1 with one clear line on stderr', async () => {
    const r = await cli(['layer', 'inspect', VECTOR_A, '--toc-digest', 'sha256:' + '0'.repeat(64)]);
    expect(r.code).toBe(1);
    expect(r.stdout.length).toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/E_TOC_DIGEST_MISMATCH.*toc digest mismatch/);
  });

  test('a file that is not a layer exits 1', async () => {
    const r = await cli(['layer', 'inspect', join(ROOT, 'package.json')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^stargz-store: E_BAD_FOOTER: /);
  });
});

describe('layer cat', () => {
  test('writes the verified bytes of a file (also through a hardlink name)', async () => {
    for (const blob of [VECTOR_A, VECTOR_B]) {
      const big = await cli(['layer', 'cat', blob, 'foo/big.bin']);
      expect(big.code).toBe(0);
      expect(big.stdout.toString()).toBe('0123456789');
      expect((await cli(['layer', 'cat', blob, '/foo/hard'])).stdout.toString()).toBe('hello\n');
      expect((await cli(['layer', 'cat', blob, 'empty'])).stdout.length).toBe(0);
    }
  });

  test('a multi-chunk file from a Podman zstd:chunked blob matches the digest in its TOC', async () => {
    const dir = join(SAMPLES_TINY, 'zstd-chunked');
    const toc = JSON.parse(await readFile(join(dir, 'toc/layer1-a71e4fbfe7bb.json'), 'utf8')) as {
      entries: Array<{ name: string; digest?: string }>;
    };
    const want = toc.entries.find((e) => e.name === 'app/big.bin')!.digest;
    const r = await cli(['layer', 'cat', join(dir, 'layer1-a71e4fbfe7bb.tar.zst'), 'app/big.bin']);
    expect(r.code).toBe(0);
    expect(r.stdout.length).toBe(4718592);
    expect(sha256(r.stdout)).toBe(want);
  });

  test('missing path, directory, digest mismatch and corrupt chunk exit 1 with one line', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['layer', 'cat', VECTOR_A, 'foo/nope'], /E_NOT_FOUND: no such file in layer: foo\/nope/],
      [['layer', 'cat', VECTOR_A, 'foo'], /E_INVALID_ARGUMENT: foo is a dir/],
      [['layer', 'cat', VECTOR_A, 'foo/link'], /symlink to bar\.txt/],
      [['layer', 'cat', VECTOR_A, 'foo/big.bin', '--toc-digest', sha256('x')], /E_TOC_DIGEST_MISMATCH/],
    ];
    const { buf } = await loadBlob(VECTOR_A);
    const bad = Buffer.from(buf);
    bad[490] = bad[490]! ^ 0xff; // deflate data of the member holding big.bin bytes 4-7
    const badPath = join(work, 'corrupt.blob');
    await writeFile(badPath, bad);
    cases.push([['layer', 'cat', badPath, 'foo/big.bin'], /E_(DIGEST_MISMATCH|DECOMPRESS)/]);
    for (const [args, pattern] of cases) {
      const r = await cli(args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(r.stderr, args.join(' ')).toMatch(pattern);
    }
  });
});

describe('layer build', () => {
  test('builds eStargz and zstd:chunked blobs that inspect/cat read back', async () => {
    const src = join(work, 'src');
    await mkdir(join(src, 'dir'), { recursive: true });
    const big = Buffer.from(
      Array.from({ length: 3000 }, (_, i) => String.fromCharCode(97 + (i % 26))).join(''),
    );
    await writeFile(join(src, 'dir/big.txt'), big);
    await writeFile(join(src, 'first.txt'), 'first\n');
    const tarPath = join(work, 'in.tar');
    await run('tar', ['-cf', tarPath, '-C', src, '.']);
    for (const format of ['estargz', 'zstd:chunked']) {
      const out = join(work, `out-${format.replace(':', '-')}.blob`);
      const r = await cli([
        'layer',
        'build',
        tarPath,
        out,
        '--format',
        format,
        '--chunk-size',
        '1024',
        '--prioritize',
        'first.txt',
      ]);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      const built = JSON.parse(r.stdout.toString());
      const blob = await readFile(out);
      expect(built.size).toBe(blob.length);
      expect(built.blobDigest).toBe(sha256(blob));
      const inspected = JSON.parse(
        (await cli(['layer', 'inspect', out, '--toc-digest', built.tocDigest])).stdout.toString(),
      );
      expect(inspected.format).toBe(format === 'estargz' ? 'estargz' : 'zstd:chunked');
      expect(inspected.prefetch.kind).toBe('landmark');
      const entry = (inspected.entries as Array<{ name: string; chunks: unknown[] }>).find(
        (e) => e.name === 'dir/big.txt',
      )!;
      expect(entry.chunks.length).toBe(3);
      const cat = await cli(['layer', 'cat', out, 'dir/big.txt']);
      expect(cat.stdout.equals(big)).toBe(true);
    }
  });

  test('bad options are refused', async () => {
    const r = await cli([
      'layer',
      'build',
      join(work, 'in.tar'),
      join(work, 'x.blob'),
      '--format',
      'squashfs',
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/E_INVALID_ARGUMENT: --format must be estargz or zstd:chunked/);
    const c = await cli(['layer', 'build', join(work, 'in.tar'), join(work, 'x.blob'), '--chunk-size', '-4']);
    expect(c.code).toBe(1);
    expect(c.stderr).toMatch(/--chunk-size must be a positive integer/);
  });
});
