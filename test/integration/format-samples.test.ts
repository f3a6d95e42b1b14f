/**
 * Real blobs from Podman 4.3.1 and ctr-remote (samples/tiny): TOC digests equal the manifest
 * annotations, and every file read through openLayer + readFileRange equals what the system
 * `gzip`/`zstd` + GNU `tar -x` produce from the same blob.
 */
import { lstat, mkdtemp, readdir, readFile, readlink, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { LayerFormat, LayerIndex, TreeNode } from '../../src/format/model.js';
import { lookupPath } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import { run, SAMPLES_TINY, sha256 } from '../helpers/format-fixtures.js';

interface Descriptor {
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

const TOC_DIGEST = 'containerd.io/snapshot/stargz/toc.digest';
const MANIFEST_CHECKSUM = 'io.containers.zstd-chunked.manifest-checksum';
const MANIFEST_POSITION = 'io.containers.zstd-chunked.manifest-position';

const KINDS: Array<{ dir: string; format: LayerFormat; tool: 'gzip' | 'zstd' }> = [
  { dir: 'estargz', format: 'estargz', tool: 'gzip' },
  { dir: 'esgz-opt', format: 'estargz', tool: 'gzip' },
  { dir: 'zstd-chunked', format: 'zstd:chunked-legacy', tool: 'zstd' },
  { dir: 'ctr-zstdchunked', format: 'zstd:chunked-legacy', tool: 'zstd' },
];

/** Files the tar stream has but the lazy tree does not (the eStargz TOC entry). */
const TAR_ONLY = new Set(['stargz.index.json']);

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'format-samples-'));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

async function walkDisk(root: string, rel = '', out = new Map<string, Awaited<ReturnType<typeof lstat>>>()) {
  for (const name of await readdir(join(root, rel))) {
    const path = rel === '' ? name : `${rel}/${name}`;
    const st = await lstat(join(root, path));
    out.set(path, st);
    if (st.isDirectory()) await walkDisk(root, path, out);
  }
  return out;
}

/** Every name in the tree (hardlink names included) with its node. */
function walkTree(node: TreeNode, prefix = '', out = new Map<string, TreeNode>()): Map<string, TreeNode> {
  for (const [name, child] of node.children ?? []) {
    const path = prefix === '' ? name : `${prefix}/${name}`;
    out.set(path, child);
    if (child.type === 'dir') walkTree(child, path, out);
  }
  return out;
}

function diskType(st: Awaited<ReturnType<typeof lstat>>): string {
  if (st.isDirectory()) return 'dir';
  if (st.isFile()) return 'reg';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isFIFO()) return 'fifo';
  if (st.isCharacterDevice()) return 'char';
  if (st.isBlockDevice()) return 'block';
  return 'other';
}

for (const kind of KINDS) {
  describe(`sample ${kind.dir}`, async () => {
    const dir = join(SAMPLES_TINY, kind.dir);
    const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as {
      layers: Descriptor[];
    };
    const files = await readdir(dir);

    manifest.layers.forEach((layer, i) => {
      const hex = layer.digest.slice('sha256:'.length, 'sha256:'.length + 12);
      const file = files.find((f) => f.startsWith(`layer${i}-${hex}`));

      test(`layer${i}: TOC digest matches the annotations and every file matches tar -x`, async () => {
        expect(file, `blob file for layer ${i}`).toBeDefined();
        const blobPath = join(dir, file!);
        const reader = await FileRangeReader.open(blobPath);
        try {
          expect(reader.size).toBe(layer.size);
          const ann = layer.annotations ?? {};
          const index = await openLayer(reader);
          expect(index.format).toBe(kind.format);
          if (kind.format === 'estargz') {
            expect(index.tocDigest).toBe(ann[TOC_DIGEST]);
            expect(index.tocJsonDigest).toBe(ann[TOC_DIGEST]);
            expect(index.manifestChecksum).toBeUndefined();
          } else {
            expect(index.tocDigest).toBe(ann[MANIFEST_CHECKSUM]);
            expect(index.manifestChecksum).toBe(ann[MANIFEST_CHECKSUM]);
            expect(String(index.tocOffset)).toBe(ann[MANIFEST_POSITION]!.split(':')[0]);
            if (kind.dir === 'ctr-zstdchunked') expect(index.tocJsonDigest).toBe(ann[TOC_DIGEST]);
          }
          // the annotation digests are accepted as expectedTocDigest
          for (const d of [ann[TOC_DIGEST], ann[MANIFEST_CHECKSUM]]) {
            if (d !== undefined)
              await expect(openLayer(reader, { expectedTocDigest: d })).resolves.toBeDefined();
          }

          const out = join(work, `${kind.dir}-${i}`);
          await run('mkdir', ['-p', out]);
          const plain = await run(kind.tool, ['-dc', blobPath]);
          await run('tar', ['-x', '--numeric-owner', '-C', out], { stdin: plain });
          await compareTrees(reader, index, out);
        } finally {
          await reader.close();
        }
      });
    });
  });
}

async function compareTrees(reader: FileRangeReader, index: LayerIndex, out: string): Promise<void> {
  const disk = await walkDisk(out);
  const tree = walkTree(index.root);
  const diskNames = [...disk.keys()].filter((p) => !TAR_ONLY.has(p)).sort();
  expect([...tree.keys()].sort()).toEqual(diskNames);

  const inodeToNode = new Map<number, TreeNode>();
  let regular = 0;
  for (const path of diskNames) {
    const st = disk.get(path)!;
    const node = lookupPath(index, path)!;
    expect(node, path).toBeDefined();
    expect(node.type, path).toBe(diskType(st));
    expect(node.uid, path).toBe(st.uid);
    expect(node.gid, path).toBe(st.gid);
    if (node.type !== 'symlink')
      expect(node.mode.toString(8), path).toBe((Number(st.mode) & 0o7777).toString(8));
    if (node.type === 'symlink') expect(node.linkName, path).toBe(await readlink(join(out, path)));
    if (node.type === 'reg') {
      regular++;
      expect(node.size, path).toBe(Number(st.size));
      expect(node.mtime, path).toBe(Math.floor(Number(st.mtimeMs) / 1000));
      const want = sha256(await readFile(join(out, path)));
      const got = await readFileRange(reader, index, node, 0, node.size);
      expect(sha256(got), path).toBe(want);
      // hardlinks: names sharing an inode on disk share one node, with nlink = names
      const ino = Number(st.ino);
      const seen = inodeToNode.get(ino);
      if (seen !== undefined) expect(seen, path).toBe(node);
      else inodeToNode.set(ino, node);
      expect(node.nlink, path).toBe(Number(st.nlink));
    }
  }
  expect(regular).toBeGreaterThan(5);
}

describe('sample edge cases (layer1, documented in samples/README.md)', () => {
  for (const kind of KINDS) {
    test(`${kind.dir}: xattr, whiteout, opaque marker, setuid, sticky, unicode`, async () => {
      const dir = join(SAMPLES_TINY, kind.dir);
      const file = (await readdir(dir)).find((f) => f.startsWith('layer1-'))!;
      const reader = await FileRangeReader.open(join(dir, file));
      try {
        const index = await openLayer(reader);
        const xattr = lookupPath(index, 'app/xattr-file')!.xattrs.get('user.lab.test');
        expect(xattr?.toString('base64')).toBe('aGVsbG8teGF0dHI=');
        expect(lookupPath(index, 'etc/.wh.debian_version')?.type).toBe('reg');
        expect(lookupPath(index, 'opt/data/.wh..wh..opq')?.type).toBe('reg');
        expect(lookupPath(index, 'app/setuid-true')!.mode).toBe(0o4755);
        expect(lookupPath(index, 'app/sticky')!.mode).toBe(0o1777);
        expect(lookupPath(index, 'app/owned')).toMatchObject({ uid: 1000, gid: 1000, mode: 0o640 });
        expect(lookupPath(index, 'app/ünïcødé-文件.txt')?.type).toBe('reg');
        expect(lookupPath(index, 'app/text.txt')!.mtime).toBe(Date.UTC(2020, 0, 2, 3, 4, 5) / 1000);
        const hard = lookupPath(index, 'app/hard1')!;
        expect(lookupPath(index, 'app/hard2')).toBe(hard);
        expect(lookupPath(index, 'app/sub/hard3')).toBe(hard);
        expect(hard.nlink).toBe(3);
      } finally {
        await reader.close();
      }
    });
  }
});
