import { createHash } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { buildLayer } from '../../src/format/writer/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { lookupPath } from '../../src/format/model.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';

/**
 * A 2 GiB tar streamed through buildLayer must not be held in memory: the input is generated on
 * the fly and the output only counted/hashed; resident memory may grow by a few chunks, not GiBs.
 */

const FILE = 256 << 20;
const FILES = 8; // 2 GiB of payload

/** ustar header for a regular file (enough for this generator; independent of the writer's encoder). */
function header(name: string, size: number): Buffer {
  const b = Buffer.alloc(512);
  b.write(name, 0);
  b.write('0000644\0', 100);
  b.write('0000000\0', 108);
  b.write('0000000\0', 116);
  b.write(size.toString(8).padStart(11, '0') + '\0', 124);
  b.write('14000000000\0', 136);
  b.write('0', 156);
  b.write('ustar\x0000', 257);
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const x of b) sum += x;
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  return b;
}

/** File i: 1 MiB blocks, each a repeated counter pattern (compressible, but not zeros). */
function* tarStream(hash: ReturnType<typeof createHash>[]): Generator<Buffer> {
  for (let i = 0; i < FILES; i++) {
    yield header(`big/file-${i}.bin`, FILE);
    const h = createHash('sha256');
    for (let off = 0; off < FILE; off += 1 << 20) {
      const block = Buffer.alloc(1 << 20, `${i}:${off};`);
      h.update(block);
      yield block;
    }
    hash.push(h);
  }
  yield Buffer.alloc(1024);
}

describe('streaming a multi-GiB tar', () => {
  it.each(['zstd:chunked', 'estargz'] as const)(
    '%s: 2 GiB in, bounded memory, consistent result',
    async (format) => {
      const hashes: ReturnType<typeof createHash>[] = [];
      let outBytes = 0;
      const blobHash = createHash('sha256');
      const kept: Buffer[] = []; // the blob is small (compressible input); keep it to read back
      const out = new Writable({
        write(chunk: Buffer, _enc, cb) {
          outBytes += chunk.length;
          blobHash.update(chunk);
          if (outBytes < 256 << 20) kept.push(chunk);
          cb();
        },
      });
      const base = process.memoryUsage().rss;
      let peak = base;
      const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50);
      const r = await buildLayer(Readable.from(tarStream(hashes)), out, {
        format,
        gzipLevel: 1,
        zstdLevel: 1,
      });
      clearInterval(timer);
      peak = Math.max(peak, process.memoryUsage().rss);
      expect(r.size).toBe(outBytes);
      expect(r.blobDigest).toBe('sha256:' + blobHash.digest('hex'));
      expect(r.uncompressedSize).toBeGreaterThan(FILES * FILE);
      const growthMiB = (peak - base) / 1048576;
      console.log(
        `${format}: blob ${(outBytes / 1048576).toFixed(0)} MiB, RSS growth ${growthMiB.toFixed(0)} MiB`,
      );
      expect(growthMiB).toBeLessThan(400);
      // read back: whole-file digests match the generator, sample ranges decode to the pattern
      expect(outBytes).toBeLessThan(256 << 20);
      const blob = Buffer.concat(kept);
      const index = await openLayer(new BufferRangeReader(blob));
      for (let i = 0; i < FILES; i++) {
        const node = lookupPath(index, `big/file-${i}.bin`)!;
        expect(node.size).toBe(FILE);
        expect(node.digest).toBe('sha256:' + hashes[i]!.digest('hex'));
      }
      const node = lookupPath(index, 'big/file-5.bin')!;
      const off = (37 << 20) + 12345;
      const got = await readFileRange(new BufferRangeReader(blob), index, node, off, 5 << 20);
      const block = (o: number): Buffer => Buffer.alloc(1 << 20, `5:${o};`);
      const want = Buffer.concat([37, 38, 39, 40, 41, 42].map((k) => block(k << 20))).subarray(
        12345,
        12345 + (5 << 20),
      );
      expect(got.equals(want)).toBe(true);
    },
    900_000,
  );
});
