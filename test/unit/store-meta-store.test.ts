import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MetaStore } from '../../src/store/meta-store.js';
import type { LayerRecord } from '../../src/store/record.js';
import { layerRecord } from '../helpers/store.js';

const record = (diffSize: number): LayerRecord =>
  layerRecord('127.0.0.1:5000/meta/app:1', `sha256:${'a'.repeat(64)}`, `sha256:${'a'.repeat(64)}`, 1000, {
    diffSize,
    diffSizeSource: 'toc-estimate',
  });

describe('MetaStore: record writes that callers do not wait for', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'sgz-meta-'));
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('a read started while writes run sees the last write; writes land in call order', async () => {
    const meta = new MetaStore(root);
    const r = record(1);
    // the resolver answers first and never awaits these
    const first = meta.putLayer(r);
    const second = meta.putLayer({ ...r, diffSize: 2, diffSizeSource: 'measured' });
    const read = await meta.getLayer(r.ref, r.digest);
    expect(read).toMatchObject({ diffSize: 2, diffSizeSource: 'measured' });
    await meta.idle();
    await Promise.all([first, second]);
    // on disk: the second record (an older write never lands over a newer one), no temp files
    const files = await readdir(join(root, 'metadata', 'layers'));
    expect(files).toHaveLength(1);
    const onDisk = JSON.parse(
      await readFile(join(root, 'metadata', 'layers', files[0]!), 'utf8'),
    ) as LayerRecord;
    expect(onDisk.diffSize).toBe(2);
    // another instance (a restart) reads it too
    expect(await new MetaStore(root).getLayer(r.ref, r.digest)).toMatchObject({ diffSize: 2 });
  });

  it('a failed write is reported to its caller; reads and idle() do not hang on it', async () => {
    // the root is a file: the metadata directories cannot be made
    const file = join(root, 'not-a-dir');
    await writeFile(file, 'x');
    const meta = new MetaStore(file);
    const r = record(1);
    const put = meta.putLayer(r);
    await expect(meta.getLayer(r.ref, r.digest)).rejects.toMatchObject({ code: 'E_IO' });
    await expect(put).rejects.toMatchObject({ code: 'E_IO' });
    await meta.idle();
  });
});
