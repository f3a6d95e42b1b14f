/**
 * The engine against real blobs (Podman 4.3.1 zstd:chunked, ctr-remote eStargz / zstd:chunked,
 * the Go vectors): every regular file read through LazyLayer must equal what GNU tar extracts
 * from the fully decompressed blob, and the background pass must reproduce the image config's
 * diff_id.
 */
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import { SHARED } from '../helpers/shared.js';

const SAMPLES = `${SHARED}/samples/tiny`;
const VECTORS = `${SHARED}/vectors`;

interface Case {
  name: string;
  file: string;
  diffID: string;
}

async function sampleCases(): Promise<Case[]> {
  const out: Case[] = [];
  for (const dir of ['estargz', 'esgz-opt', 'zstd-chunked', 'ctr-zstdchunked']) {
    const manifest = JSON.parse(await readFile(join(SAMPLES, dir, 'manifest.json'), 'utf8')) as {
      layers: Array<{ digest: string }>;
    };
    const config = JSON.parse(await readFile(join(SAMPLES, dir, 'config.json'), 'utf8')) as {
      rootfs: { diff_ids: string[] };
    };
    manifest.layers.forEach((l, i) => {
      const short = l.digest.slice(7, 19);
      const ext = dir.includes('zstd') ? 'tar.zst' : 'tar.gz';
      out.push({
        name: `${dir}/layer${i}`,
        file: join(SAMPLES, dir, `layer${i}-${short}.${ext}`),
        diffID: config.rootfs.diff_ids[i]!,
      });
    });
  }
  out.push({
    name: 'vector-a',
    file: join(VECTORS, 'vector-a-estargz-gzip9-chunk4-prio.blob'),
    diffID: 'sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618',
  });
  out.push({
    name: 'vector-b',
    file: join(VECTORS, 'vector-b-zstdchunked-chunk4.blob'),
    diffID: 'sha256:ee484253ce22b6ece91f77f3bd461abcd602337ea94aa6ba684270b5cb455524',
  });
  return out;
}

const cases = await sampleCases();
let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'layer-samples-'));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('LazyLayer on real sample blobs', () => {
  it.each(cases)('$name: every regular file equals the tar extraction, cold and warm', async (c) => {
    const dir = await mkdtemp(join(work, 'x-'));
    const tool = (await readFile(c.file)).subarray(0, 2).equals(Buffer.from([0x1f, 0x8b])) ? 'gzip' : 'zstd';
    execFileSync('sh', ['-c', `${tool} -dc "$1" | tar -x -C "$2"`, 'sh', c.file, dir]);
    const reader = await FileRangeReader.open(c.file);
    // counts what the engine asks of the blob (openLayer reads the file directly)
    let sourceReads = 0;
    const source = {
      size: reader.size,
      read: (offset: number, length: number) => {
        sourceReads++;
        return reader.read(offset, length);
      },
    };
    const cache = await ChunkCache.open({ root: join(dir, '.root'), minFreeBytes: 0 });
    try {
      const index = await openLayer(reader);
      const layer = new LazyLayer({
        index,
        source,
        cache,
        layerKey: c.name,
        backgroundFetch: false,
        scheduler: new FetchScheduler({ quietMs: 0 }),
      });
      const regs = index.nodes.filter((n) => n !== undefined && n.type === 'reg');
      expect(regs.length).toBeGreaterThan(0);
      for (const pass of ['cold', 'warm']) {
        const readsBefore = sourceReads;
        for (const n of regs) {
          const expected = await readFile(join(dir, n.path));
          expect(n.size).toBe(expected.length);
          const whole = await layer.read(n, 0, n.size);
          expect(whole.equals(expected), `${pass} ${n.path}`).toBe(true);
          for (let i = 0; i < 5; i++) {
            const off = randomInt(0, n.size + 1);
            const len = randomInt(0, 300_000);
            expect((await layer.read(n, off, len)).equals(expected.subarray(off, off + len))).toBe(true);
          }
        }
        if (pass === 'warm') {
          // everything came from the disk cache: not one read of the blob
          expect(sourceReads - readsBefore).toBe(0);
        } else {
          expect(sourceReads).toBeGreaterThan(0);
        }
        // cache writes finish in the background: wait for them, then force disk reads
        await cache.flush();
        cache.dropMemory();
      }
      await layer.close();
    } finally {
      await cache.close();
      await reader.close();
    }
  });

  it.each(cases)('$name: background fetch completes and the DiffID check passes', async (c) => {
    const reader = await FileRangeReader.open(c.file);
    const cache = await ChunkCache.open({ root: await mkdtemp(join(work, 'bg-')), minFreeBytes: 0 });
    try {
      const index = await openLayer(reader);
      const layer = new LazyLayer({
        index,
        source: reader,
        cache,
        layerKey: c.name,
        expectedDiffID: c.diffID,
        backgroundUnitBytes: 256 * 1024,
        scheduler: new FetchScheduler({ quietMs: 0 }),
      });
      layer.start();
      await layer.whenBackgroundDone();
      const st = layer.state();
      expect(st).toMatchObject({ fullyVerified: true, bad: false, backgroundDone: true, percent: 100 });
      expect(st.chunksVerified).toBe(st.chunksTotal);
      expect(st.lastError).toBeUndefined();
      // the tar's length, as the CLI decompressors count it
      const tool = (await readFile(c.file)).subarray(0, 2).equals(Buffer.from([0x1f, 0x8b]))
        ? 'gzip'
        : 'zstd';
      const size = execFileSync('sh', ['-c', `${tool} -dc "$1" | wc -c`, 'sh', c.file], { encoding: 'utf8' });
      expect(st.uncompressedSize).toBe(Number(size.trim()));
    } finally {
      await cache.close();
      await reader.close();
    }
  });
});
