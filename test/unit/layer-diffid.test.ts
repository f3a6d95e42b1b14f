import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { StreamDigest } from '../../src/layer/diffid.js';
import { SHARED } from '../helpers/shared.js';

const SAMPLES = `${SHARED}/samples/tiny`;
const VECTORS = `${SHARED}/vectors`;

async function configDiffIds(dir: string): Promise<string[]> {
  const cfg = JSON.parse(await readFile(join(SAMPLES, dir, 'config.json'), 'utf8')) as {
    rootfs: { diff_ids: string[] };
  };
  return cfg.rootfs.diff_ids;
}

type Digester = typeof StreamDigest;

async function digestInPieces(Impl: Digester, blob: Buffer, compression: 'gzip' | 'zstd', piece: number) {
  const s = new Impl(compression);
  try {
    for (let off = 0; off < blob.length; off += piece) await s.write(blob.subarray(off, off + piece));
    return await s.end();
  } catch (err) {
    await s.destroy();
    throw err;
  }
}

describe.each([['StreamDigest (thread pool, no worker)', StreamDigest]] as const)(
  '%s: DiffID of a whole compressed layer',
  (_name, Impl) => {
    it.each([
      ['estargz', 'layer0-d1a242188a5d.tar.gz', 0, 'gzip'],
      ['estargz', 'layer1-f0e382bf7d85.tar.gz', 1, 'gzip'],
      ['esgz-opt', 'layer0-9046621451f5.tar.gz', 0, 'gzip'],
      ['zstd-chunked', 'layer0-9b70c3633ed7.tar.zst', 0, 'zstd'],
      ['zstd-chunked', 'layer1-a71e4fbfe7bb.tar.zst', 1, 'zstd'],
      ['ctr-zstdchunked', 'layer0-252f87700fbb.tar.zst', 0, 'zstd'],
      ['ctr-zstdchunked', 'layer1-bab66c17883e.tar.zst', 1, 'zstd'],
    ] as const)('%s %s matches the config diff_id', async (dir, file, layer, compression) => {
      const blob = await readFile(join(SAMPLES, dir, file));
      const expected = (await configDiffIds(dir))[layer];
      const { digest } = await digestInPieces(Impl, blob, compression, 777_777);
      expect(digest).toBe(expected);
    });

    it('vector A (eStargz) and B (zstd:chunked legacy) give the documented DiffIDs and lengths', async () => {
      const a = await readFile(join(VECTORS, 'vector-a-estargz-gzip9-chunk4-prio.blob'));
      const b = await readFile(join(VECTORS, 'vector-b-zstdchunked-chunk4.blob'));
      expect((await digestInPieces(Impl, a, 'gzip', 100)).digest).toBe(
        'sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618',
      );
      const rb = await digestInPieces(Impl, b, 'zstd', 37);
      expect(rb.digest).toBe('sha256:ee484253ce22b6ece91f77f3bd461abcd602337ea94aa6ba684270b5cb455524');
      expect(rb.size).toBe(6656);
    });

    it('a corrupted stream fails with a typed error instead of producing a digest', async () => {
      const blob = Buffer.from(await readFile(join(SAMPLES, 'estargz', 'layer0-d1a242188a5d.tar.gz')));
      for (let i = 5000; i < 5100; i++) blob[i] = 0;
      await expect(digestInPieces(Impl, blob, 'gzip', 65536)).rejects.toMatchObject({ code: 'E_DECOMPRESS' });
    });

    it('a zstd stream cut inside a frame, or corrupted, fails with a typed error', async () => {
      const blob = await readFile(join(SAMPLES, 'zstd-chunked', 'layer0-9b70c3633ed7.tar.zst'));
      const cut = new Impl('zstd');
      await cut.write(blob.subarray(0, 3000)); // inside the first data frame
      await expect(cut.end()).rejects.toMatchObject({ code: 'E_DECOMPRESS' });
      const bad = Buffer.from(blob);
      for (let i = 100; i < 400; i++) bad[i] = 0xff;
      await expect(digestInPieces(Impl, bad, 'zstd', 4096)).rejects.toMatchObject({ code: 'E_DECOMPRESS' });
    });

    it('is done with each buffer written once write() resolves (the caller may reuse it)', async () => {
      const dir = 'zstd-chunked';
      const blob = await readFile(join(SAMPLES, dir, 'layer0-9b70c3633ed7.tar.zst'));
      const s = new Impl('zstd');
      const scratch = Buffer.alloc(5000);
      for (let off = 0; off < blob.length; off += scratch.length) {
        const n = blob.copy(scratch, 0, off, off + scratch.length);
        await s.write(scratch.subarray(0, n));
        scratch.fill(0xee); // overwritten before the next piece: must not change the digest
      }
      expect((await s.end()).digest).toBe((await configDiffIds(dir))[0]);
    });
  },
);
