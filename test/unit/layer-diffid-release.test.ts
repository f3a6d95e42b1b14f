/**
 * The DiffID check of a gzip layer gives each of gunzip's output buffers back once hashed, instead
 * of leaving hundreds of 256 KiB buffers per layer to the garbage collector. node:zlib is wrapped
 * (own file: the mock applies to the whole file) to see every view gunzip emits.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Transform } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { describe, expect, it, vi } from 'vitest';

const emitted: Buffer[] = [];
vi.mock('node:zlib', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:zlib')>();
  return {
    ...real,
    createGunzip: (opts?: Parameters<typeof real.createGunzip>[0]): Transform => {
      const dec = real.createGunzip(opts);
      dec.on('data', (d: Buffer) => emitted.push(d));
      return dec;
    },
  };
});

const { StreamDigest } = await import('../../src/layer/diffid.js');

describe('StreamDigest (gzip)', () => {
  it('gives back every full output buffer once hashed, and the digest is unchanged', async () => {
    // three members, ~3 MiB of output: a dozen full 256 KiB buffers
    const parts = [randomBytes(1 << 20), Buffer.alloc(1 << 20, 7), randomBytes((1 << 20) + 12345)];
    const blob = Buffer.concat(parts.map((p) => gzipSync(p)));
    const s = new StreamDigest('gzip');
    for (let off = 0; off < blob.length; off += 100_000) await s.write(blob.subarray(off, off + 100_000));
    const { digest, size } = await s.end();
    const h = createHash('sha256');
    for (const p of parts) h.update(p);
    expect({ digest, size }).toEqual({
      digest: 'sha256:' + h.digest('hex'),
      size: parts.reduce((n, p) => n + p.length, 0),
    });
    // every buffer whose last view was emitted is detached; only the last, partly filled one is not
    const buffers = new Set(emitted.map((d) => d.buffer));
    const live = [...buffers].filter((ab) => ab.byteLength > 0);
    expect(buffers.size).toBeGreaterThanOrEqual(12);
    expect(live.length).toBeLessThanOrEqual(1);
  });
});
