/**
 * The start-up rehearsal (store/rehearsal.ts): a throwaway store resolves the synthetic image's two
 * layers (eStargz, zstd:chunked) from an in-process registry and reads them through the VirtualFs;
 * nothing of it stays. Also: the saved image (rehearsal-image-data.ts) is what the builder makes.
 */
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { rehearseFirstLookups } from '../../src/store/rehearsal.js';
import { loadRehearsalImage, saveRehearsalImage } from '../../src/store/rehearsal-image.js';
import { buildRehearsalImage } from '../../src/store/rehearsal-image-build.js';
import { REHEARSAL_IMAGE } from '../../src/store/rehearsal-image-data.js';
import { openLayer } from '../../src/format/open-layer.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rehearsal-test-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('rehearsal image', () => {
  it('the saved copy is what the builder makes (else: node scripts/rehearsal-image.js)', async () => {
    expect(saveRehearsalImage(await buildRehearsalImage())).toEqual(REHEARSAL_IMAGE);
  });
});

describe('rehearseFirstLookups', () => {
  it('resolves both layers and reads a chunked file of each, verified, then removes its root', async () => {
    const root = join(dir, 'rehearsal');
    // a root a killed store left behind is cleared first
    await mkdir(join(root, 'metadata'), { recursive: true });
    await writeFile(join(root, 'metadata', 'stale'), 'x');
    const r = await rehearseFirstLookups({ root });
    const image = loadRehearsalImage(REHEARSAL_IMAGE);
    expect(r.layers).toBe(2);
    // each layer's file is 4 chunks of 16 KiB + 1000 bytes
    expect(r.bytesRead).toBe(2 * (4 * 16 * 1024 + 1000));
    expect(image.layers).toHaveLength(2);
    expect(await readdir(dir)).toEqual([]);
  });

  it('fails when a chunk does not verify, with the reason, and still leaves nothing behind', async () => {
    const image = loadRehearsalImage(REHEARSAL_IMAGE);
    const { digest, chunkedFile } = image.layers[0]!;
    const blob = Buffer.from(image.blobs.get(digest)!);
    const index = await openLayer(new BufferRangeReader(blob));
    const chunk = index.nodes.find((n) => n?.path === chunkedFile)!.chunks[1]!;
    // one byte inside the second chunk's gzip member: it inflates to other bytes or not at all
    blob[(chunk.compressedOffset + chunk.compressedEnd) >> 1]! ^= 0x55;
    image.blobs.set(digest, blob);
    const root = join(dir, 'rehearsal');
    const err = await rehearseFirstLookups({ root, image }).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'E_DIGEST_MISMATCH',
      message: expect.stringContaining('offset 16384'),
    });
    expect(await readdir(dir)).toEqual([]);
  });
});
