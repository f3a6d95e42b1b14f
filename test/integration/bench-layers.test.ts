import { execFile } from 'node:child_process';
import { link, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gzipLayerIntoLayout, initLayout, writeImage, MT_LAYER_GZIP } from '../../bench/lib/oci.js';
import { createLayerTar, walkTree } from '../../bench/lib/tarball.js';

// Independent tools check what our code wrote: GNU tar, gzip, sha256sum, skopeo, python3.
const exec = promisify(execFile);
const sh = async (cmd: string, args: string[]) => (await exec(cmd, args, { maxBuffer: 64 << 20 })).stdout;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sgz-bench-layers-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('layer tars', () => {
  it('lists parents before children, without "./", with links and long names preserved', async () => {
    const root = join(dir, 'tree');
    const long = 'd'.repeat(120);
    await mkdir(join(root, 'b/sub'), { recursive: true });
    await mkdir(join(root, 'a', long), { recursive: true });
    await writeFile(join(root, 'b/sub/file.txt'), 'hello');
    await writeFile(join(root, 'a', long, 'f'), 'long');
    await link(join(root, 'b/sub/file.txt'), join(root, 'b/hard'));
    await symlink('sub/file.txt', join(root, 'b/soft'));
    const t = await createLayerTar({ root, out: join(dir, 'tree.tar') });
    const listing = (await sh('tar', ['-tvf', t.path])).trim().split('\n');
    const names = (await sh('tar', ['-tf', t.path])).trim().split('\n');
    expect(names.every((n) => !n.startsWith('./') && !n.startsWith('/'))).toBe(true);
    for (const n of names) {
      const parent = n.replace(/\/$/, '').split('/').slice(0, -1).join('/');
      if (parent) expect(names.indexOf(parent + '/')).toBeLessThan(names.indexOf(n));
    }
    expect(names).toContain(`a/${long}/f`);
    expect(listing.find((l) => l.includes('b/soft'))).toContain('-> sub/file.txt');
    // GNU tar stores the second path of a hard link pair as a link entry
    expect(listing.some((l) => /b\/(hard|sub\/file\.txt) link to b\/(hard|sub\/file\.txt)/.test(l))).toBe(
      true,
    );
    expect(t.files.sort()).toEqual([`a/${long}/f`, 'b/hard', 'b/sub/file.txt']);
    // atime/ctime/sub-second mtime records are dropped: no per-file PAX headers for plain short names
    const raw = await readFile(t.path);
    expect(raw.includes(Buffer.from('atime='))).toBe(false);
    expect(raw.includes(Buffer.from('mtime='))).toBe(false);
  });

  it('turns an overlayfs upper dir into an OCI diff (whiteouts and opaque dirs)', async () => {
    const up = join(dir, 'upper');
    await mkdir(join(up, 'etc'), { recursive: true });
    await mkdir(join(up, 'opt/data'), { recursive: true });
    await writeFile(join(up, 'opt/data/new'), 'n');
    await writeFile(join(up, 'etc/added'), 'a');
    // what overlayfs writes for a deleted lower file (0:0 char device) and a replaced directory
    await sh('mknod', [join(up, 'etc/removed'), 'c', '0', '0']);
    await sh('python3', [
      '-c',
      'import os,sys; os.setxattr(sys.argv[1], "trusted.overlay.opaque", b"y")',
      join(up, 'opt/data'),
    ]);
    const t = await createLayerTar({ root: up, out: join(dir, 'upper.tar'), overlayUpper: true });
    const listing = (await sh('tar', ['-tvf', t.path])).trim().split('\n');
    const names = (await sh('tar', ['-tf', t.path])).trim().split('\n');
    expect(names).toContain('etc/.wh.removed');
    expect(names).toContain('opt/data/.wh..wh..opq');
    expect(names).not.toContain('etc/removed');
    expect(listing.find((l) => l.endsWith('etc/.wh.removed'))!.startsWith('-')).toBe(true);
    expect(listing.some((l) => l.startsWith('c'))).toBe(false);
    expect(t.entries).toContain('etc/.wh.removed');
    // the overlay xattr itself must not leak into the layer
    const xattrs = await sh('tar', ['--xattrs', '--xattrs-include=*', '-tvvf', t.path]);
    expect(xattrs).not.toContain('trusted.overlay');
  });

  it('walks depth-first in bytewise name order', async () => {
    const root = join(dir, 'order');
    await mkdir(join(root, 'a'), { recursive: true });
    await writeFile(join(root, 'a-b'), '');
    await writeFile(join(root, 'a/z'), '');
    await writeFile(join(root, 'B'), '');
    expect((await walkTree(root)).map((e) => e.path)).toEqual(['B', 'a', 'a/z', 'a-b']);
  });
});

describe('OCI layouts', () => {
  it('writes blobs under their digests, diff_ids of the uncompressed tar, and tagged manifests', async () => {
    const root = join(dir, 'img');
    await mkdir(join(root, 'bin'), { recursive: true });
    await writeFile(join(root, 'bin/hello'), 'hello world\n'.repeat(1000));
    const tar = await createLayerTar({ root, out: join(dir, 'img.tar') });
    const layout = join(dir, 'layout');
    await initLayout(layout);
    const layer = await gzipLayerIntoLayout(layout, tar.path);
    const blob = join(layout, 'blobs/sha256', layer.digest.slice(7));
    expect((await sh('sha256sum', [blob])).split(' ')[0]).toBe(layer.digest.slice(7));
    expect((await sh('sh', ['-c', `gzip -dc '${blob}' | sha256sum`])).split(' ')[0]).toBe(
      layer.diffID.slice(7),
    );
    expect((await sh('sha256sum', [tar.path])).split(' ')[0]).toBe(layer.diffID.slice(7));
    expect(layer.mediaType).toBe(MT_LAYER_GZIP);
    const img = await writeImage(layout, 'v1', [{ ...layer, annotations: { 'x.test/a': 'b' } }], {
      cmd: ['/bin/sh'],
      env: ['PATH=/bin'],
      workingDir: '/app',
    });
    await writeImage(layout, 'v2', [layer], { cmd: ['/bin/true'], env: [] });
    const inspect = JSON.parse(await sh('skopeo', ['inspect', '--raw', `oci:${layout}:v1`])) as {
      layers: Array<{ digest: string; annotations?: Record<string, string> }>;
      config: { digest: string };
    };
    expect(inspect.layers[0]!.digest).toBe(layer.digest);
    expect(inspect.layers[0]!.annotations).toEqual({ 'x.test/a': 'b' });
    expect(inspect.config.digest).toBe(img.configDigest);
    const cfg = JSON.parse(await sh('skopeo', ['inspect', '--config', `oci:${layout}:v1`])) as {
      rootfs: { diff_ids: string[] };
      config: { Cmd: string[]; WorkingDir: string };
    };
    expect(cfg.rootfs.diff_ids).toEqual([layer.diffID]);
    expect(cfg.config).toMatchObject({ Cmd: ['/bin/sh'], WorkingDir: '/app' });
    const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as { manifests: unknown[] };
    expect(index.manifests).toHaveLength(2);
    // re-tagging replaces, never duplicates
    await writeImage(layout, 'v2', [layer], { cmd: ['/bin/false'], env: [] });
    expect(
      (JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as { manifests: unknown[] }).manifests,
    ).toHaveLength(2);
  });
});
