import { createHash, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { gzipSync } from 'node:zlib';
import { compress as zstdCompress } from 'zstd-napi';
import { describe, expect, it } from 'vitest';
import { decodeChunk, decodeChunks, decompressionCount, sha256Async } from '../../src/format/codec.js';
import type { Chunk } from '../../src/format/model.js';
import { DigestMismatchError, StoreError } from '../../src/util/errors.js';
import { releaseBuffer } from '../../src/util/release-buffer.js';

const require = createRequire(import.meta.url);
const zstd = require('zstd-napi') as { compress(b: Uint8Array): Buffer; decompress(b: Uint8Array): Buffer };

const sha = (b: Uint8Array): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

/** Compress one zstd frame with zstd-napi's one-shot API (the code under test only decompresses). */
function zstdFrame(data: Buffer, level = 3): Buffer {
  return zstdCompress(data, { compressionLevel: level });
}

function chunkOf(data: Buffer, extra: Partial<Chunk> = {}): Chunk {
  return {
    fileOffset: 0,
    size: data.length,
    compressedOffset: 0,
    compressedEnd: 0,
    innerOffset: 0,
    digest: sha(data),
    ...extra,
  };
}

/** Text-like data: compressible but not trivially. */
function texty(n: number): Buffer {
  const words = ['alpha', 'beta', 'gamma', 'delta', 'lorem', 'ipsum', '\n', 'kernel', 'fuse', '0x1f'];
  const r = randomBytes(n);
  const out = Buffer.alloc(n);
  let o = 0;
  for (let i = 0; o < n; i++) {
    const w = words[r[i % n]! % words.length]! + ' ';
    o += out.write(w, o);
  }
  return out;
}

describe('decodeChunk', () => {
  it('decodes gzip and zstd spans to the original bytes', async () => {
    const data = texty(300_000);
    expect((await decodeChunk('gzip', gzipSync(data), chunkOf(data))).equals(data)).toBe(true);
    expect((await decodeChunk('zstd', zstdFrame(data), chunkOf(data))).equals(data)).toBe(true);
  });

  it('skips innerOffset across gzip members and zstd frames and stops at size', async () => {
    const a = texty(5000);
    const b = randomBytes(7000);
    const c = texty(9000);
    const want = Buffer.concat([a, b, c]).subarray(3000, 3000 + 8000);
    const gz = Buffer.concat([gzipSync(a), gzipSync(b), gzipSync(c)]);
    const zs = Buffer.concat([zstdFrame(a), zstdFrame(b), zstdFrame(c)]);
    const chunk = chunkOf(want, { innerOffset: 3000 });
    expect((await decodeChunk('gzip', gz, chunk)).equals(want)).toBe(true);
    expect((await decodeChunk('zstd', zs, chunk)).equals(want)).toBe(true);
  });

  it('returns a chunk shorter than the frame (trailing tar headers are ignored)', async () => {
    const data = texty(4096);
    const frame = zstdFrame(Buffer.concat([data, Buffer.alloc(1536)]));
    expect((await decodeChunk('zstd', frame, chunkOf(data))).equals(data)).toBe(true);
  });

  it('digest mismatch -> DigestMismatchError with expected, actual, offset and path', async () => {
    const data = texty(10_000);
    const wrong = 'sha256:' + '0'.repeat(64);
    for (const [kind, span] of [
      ['gzip', gzipSync(data)],
      ['zstd', zstdFrame(data)],
    ] as const) {
      const err = await decodeChunk(kind, span, chunkOf(data, { digest: wrong, fileOffset: 8192 }), {
        path: 'usr/lib/x.so',
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DigestMismatchError);
      const e = err as DigestMismatchError;
      expect(e.code).toBe('E_DIGEST_MISMATCH');
      expect(e.context.expected).toBe(wrong);
      expect(e.context.actual).toBe(sha(data));
      expect(e.context.offset).toBe(8192);
      expect(e.context.path).toBe('usr/lib/x.so');
    }
  });

  it('corrupt data -> E_DECOMPRESS, short data -> E_TRUNCATED, never bytes', async () => {
    const data = texty(50_000);
    const gz = gzipSync(data);
    const badGz = Buffer.from(gz);
    badGz.fill(0xff, 20, 40); // inside the deflate stream
    const e1 = await decodeChunk('gzip', badGz, chunkOf(data)).catch((e: unknown) => e);
    expect(e1).toBeInstanceOf(StoreError);
    expect((e1 as StoreError).code).toBe('E_DECOMPRESS');
    const e2 = await decodeChunk('zstd', randomBytes(1000), chunkOf(data)).catch((e: unknown) => e);
    expect((e2 as StoreError).code).toBe('E_DECOMPRESS');
    // A valid frame holding less than the TOC promises.
    const e3 = await decodeChunk('zstd', zstdFrame(data.subarray(0, 1000)), chunkOf(data)).catch(
      (e: unknown) => e,
    );
    expect((e3 as StoreError).code).toBe('E_TRUNCATED');
    // Truncated zstd frame: whatever decodes is short (or undecodable), never returned.
    const zs = zstdFrame(data);
    const e4 = await decodeChunk('zstd', zs.subarray(0, zs.length - 100), chunkOf(data)).catch(
      (e: unknown) => e,
    );
    expect(['E_TRUNCATED', 'E_DECOMPRESS']).toContain((e4 as StoreError).code);
    const e5 = await decodeChunk('gzip', gz.subarray(0, gz.length - 100), chunkOf(data)).catch(
      (e: unknown) => e,
    );
    expect(['E_TRUNCATED', 'E_DECOMPRESS']).toContain((e5 as StoreError).code);
  });

  it('zeros chunks need no span and are verified', async () => {
    const zeros = Buffer.alloc(1 << 20);
    const out = await decodeChunk('zstd', Buffer.alloc(0), chunkOf(zeros, { zeros: true }));
    expect(out.equals(zeros)).toBe(true);
    const err = await decodeChunk('zstd', Buffer.alloc(0), chunkOf(zeros, { zeros: true, size: 1000 })).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DigestMismatchError);
  });

  it('decodeChunks: chunks sharing one member are decoded from one task, each verified alone', async () => {
    const files = [texty(3000), randomBytes(500), texty(7000), randomBytes(1)];
    const plain = Buffer.concat(files);
    const inner: number[] = [];
    files.reduce((pos, f) => (inner.push(pos), pos + f.length), 0);
    for (const [kind, span] of [
      ['gzip', gzipSync(plain)],
      ['zstd', zstdFrame(plain)],
    ] as const) {
      const chunks = files.map((f, i) => chunkOf(f, { innerOffset: inner[i]!, fileOffset: 100 * i }));
      chunks[2] = { ...chunks[2]!, digest: sha(Buffer.from('lie')) };
      const before = decompressionCount();
      {
        const out = await decodeChunks(kind, span, chunks, { path: 'x' });
        expect(decompressionCount() - before).toBe(1);
        expect((out[0] as Buffer).equals(files[0]!)).toBe(true);
        expect((out[1] as Buffer).equals(files[1]!)).toBe(true);
        expect(out[2]).toBeInstanceOf(DigestMismatchError);
        expect((out[2] as StoreError).context).toMatchObject({
          offset: 200,
          path: 'x',
          actual: sha(files[2]!),
        });
        expect((out[3] as Buffer).equals(files[3]!)).toBe(true);
      }
    }
    // a span that does not decompress fails every chunk, typed
    const bad = await decodeChunks('zstd', randomBytes(100), [chunkOf(files[0]!), chunkOf(files[1]!)]);
    expect(bad.map((r) => (r as StoreError).code)).toEqual(['E_DECOMPRESS', 'E_DECOMPRESS']);
    // a chunk beyond what the member holds: E_TRUNCATED for it only
    const short = await decodeChunks('gzip', gzipSync(plain), [
      chunkOf(files[0]!),
      chunkOf(files[1]!, { innerOffset: plain.length }),
    ]);
    expect((short[0] as Buffer).equals(files[0]!)).toBe(true);
    expect((short[1] as StoreError).code).toBe('E_TRUNCATED');
  });

  it('hands out small chunks in memory of their own (releasable, never a slice of the shared slab)', async () => {
    // Node slices buffers under 32 KiB out of a shared 64 KiB slab: such a chunk could neither be
    // released nor kept by the memory LRU without a copy
    const small = texty(3000);
    const z = await decodeChunk('zstd', zstdFrame(small), chunkOf(small));
    const a = texty(5000);
    const b = texty(6000);
    const across = Buffer.concat([a, b]).subarray(1000, 9000);
    const g = await decodeChunk(
      'gzip',
      Buffer.concat([gzipSync(a), gzipSync(b)]),
      chunkOf(across, { innerOffset: 1000 }),
    );
    for (const [out, want] of [
      [z, small],
      [g, across],
    ] as const) {
      expect(out.equals(want)).toBe(true);
      expect({ offset: out.byteOffset, whole: out.buffer.byteLength }).toEqual({
        offset: 0,
        whole: want.length,
      });
      expect(releaseBuffer(out)).toBe(true);
    }
  });

  it('does not detach the caller span', async () => {
    const data = texty(20_000);
    const span = zstdFrame(data);
    const copy = Buffer.from(span);
    await decodeChunk('zstd', span, chunkOf(data));
    expect(span.equals(copy)).toBe(true);
  });

  it('many concurrent decodes are all correct', async () => {
    const items = Array.from({ length: 300 }, (_, i) => {
      const d = i % 3 === 0 ? randomBytes(1000 + i * 37) : texty(2000 + i * 101);
      return { d, gz: i % 2 === 0, span: i % 2 === 0 ? gzipSync(d) : zstd.compress(d) };
    });
    const outs = await Promise.all(
      items.map((it) => decodeChunk(it.gz ? 'gzip' : 'zstd', it.span, chunkOf(it.d))),
    );
    outs.forEach((o, i) => expect(o.equals(items[i]!.d)).toBe(true));
  });

  it('keeps the event loop responsive while decoding a 64 MiB zstd chunk', async () => {
    // Half-entropy bytes: the span is ~32 MiB, so copying it to the worker is real work too.
    const data = randomBytes(64 << 20);
    for (let i = 0; i < data.length; i++) data[i] = data[i]! & 0x0f;
    const span = zstd.compress(data);
    const chunk = chunkOf(data);
    // The same work done synchronously on the main thread, for scale.
    let t0 = performance.now();
    const plain = zstd.decompress(span);
    createHash('sha256').update(plain).digest();
    const syncMs = performance.now() - t0;
    await decodeChunk('zstd', span, chunk); // warm the worker
    // Blocking by our code would show in every attempt; CPU contention from other processes on a
    // shared machine does not, so the least-lagged attempt is the honest measure.
    const lags: number[] = [];
    let asyncMs = 0;
    for (let attempt = 0; attempt < 4; attempt++) {
      let maxLag = 0;
      let last = performance.now();
      const timer = setInterval(() => {
        const now = performance.now();
        maxLag = Math.max(maxLag, now - last - 1);
        last = now;
      }, 1);
      t0 = performance.now();
      const out = await decodeChunk('zstd', span, chunk);
      asyncMs = performance.now() - t0;
      clearInterval(timer);
      expect(out.length).toBe(data.length);
      lags.push(maxLag);
    }
    const lag = Math.min(...lags);
    console.log(
      `64 MiB zstd chunk: sync ${syncMs.toFixed(1)} ms, off-thread ${asyncMs.toFixed(1)} ms, ` +
        `max event-loop lag per attempt ${lags.map((l) => l.toFixed(1)).join('/')} ms`,
    );
    expect(lag).toBeLessThan(Math.max(15, syncMs / 4));
  });
});

describe('sha256Async', () => {
  it('hashes one step, step boundaries and several steps exactly, and leaves the input intact', async () => {
    for (const n of [0, 1000, 1 << 20, (1 << 20) + 1, 2 << 20, 9 << 20]) {
      const b = randomBytes(n);
      const copy = Buffer.from(b);
      expect(await sha256Async(b), `${n} bytes`).toBe(sha(copy));
      expect(b.equals(copy)).toBe(true);
    }
  });
});

describe('decoding on the thread pool (no worker threads)', () => {
  /** gzip members of `parts`, concatenated: a chunk spanning members, like a split eStargz chunk. */
  const members = (parts: Buffer[]): Buffer => Buffer.concat(parts.map((p) => gzipSync(p)));

  it('gives the same bytes as a reference decoder, across sizes, step sizes and members', async () => {
    // 20 MiB: more than one output step (8 MiB) of the gzip path and beyond the synchronous zstd limit
    const sizes = [1, 63, 64, 65, 4096, 1 << 20, (4 << 20) + 17, 20 << 20];
    for (const n of sizes) {
      const data = n > 1 << 20 ? texty(n) : randomBytes(n);
      for (const [kind, span] of [
        ['gzip', gzipSync(data)],
        ['gzip', members([data.subarray(0, n >> 1), data.subarray(n >> 1)])],
        ['zstd', zstdFrame(data)],
      ] as const) {
        const out = await decodeChunk(kind, span, chunkOf(data));
        expect(out.length, `${kind} ${n}`).toBe(n);
        expect(out.equals(data), `${kind} ${n}`).toBe(true);
        // the result is the chunk itself, not a view into a larger decode buffer
        expect(out.buffer.byteLength, `${kind} ${n}`).toBeLessThanOrEqual(Math.max(n, Buffer.poolSize));
      }
    }
  });

  it('still detects a wrong digest, a truncated member and garbage at every size', async () => {
    for (const n of [100, 300_000, 9 << 20]) {
      const data = texty(n);
      for (const [kind, span] of [
        ['gzip', gzipSync(data)],
        ['zstd', zstdFrame(data)],
      ] as const) {
        const lie = chunkOf(data, { digest: sha(Buffer.from('other')) });
        await expect(decodeChunk(kind, span, lie)).rejects.toBeInstanceOf(DigestMismatchError);
        const cut = span.subarray(0, span.length >> 1);
        const err = (await decodeChunk(kind, cut, chunkOf(data)).catch((e: unknown) => e)) as StoreError;
        expect(err).toBeInstanceOf(StoreError);
        expect(['E_TRUNCATED', 'E_DECOMPRESS']).toContain(err.code);
        const flipped = Buffer.from(span);
        flipped[flipped.length >> 1] = flipped[flipped.length >> 1]! ^ 0xff;
        const bad = (await decodeChunk(kind, flipped, chunkOf(data)).catch((e: unknown) => e)) as StoreError;
        expect(bad).toBeInstanceOf(StoreError);
        expect(['E_DIGEST_MISMATCH', 'E_DECOMPRESS', 'E_TRUNCATED']).toContain(bad.code);
      }
    }
  });
});
