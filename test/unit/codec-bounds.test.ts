/**
 * Memory bounds of the codec: a gzip bomb span and a huge `zeros` chunk must never make the
 * process allocate what they would expand to. Own test file, so the process's peak RSS
 * (getrusage maxRSS) is not masked by other suites.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createGzip, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { decodeChunk, isZerosVerified, verifyZeros } from '../../src/format/codec.js';
import type { Chunk } from '../../src/format/model.js';
import { DigestMismatchError, StoreError } from '../../src/util/errors.js';

const MiB = 1 << 20;
const sha = (b: Uint8Array): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

/** sha256 of `n` zero bytes, hashed here a MiB at a time (independent of the code under test). */
function zerosDigest(n: number): string {
  const h = createHash('sha256');
  const block = Buffer.alloc(MiB);
  for (let left = n; left > 0; left -= MiB) h.update(left >= MiB ? block : block.subarray(0, left));
  return 'sha256:' + h.digest('hex');
}

/** One gzip member of `n` zero bytes, compressed as a stream (never `n` bytes in memory). */
async function gzipZeros(n: number): Promise<Buffer> {
  const gz = createGzip({ level: 9 });
  const out: Buffer[] = [];
  gz.on('data', (d: Buffer) => out.push(d));
  const ended = new Promise((resolve, reject) => gz.on('end', resolve).on('error', reject));
  const block = Buffer.alloc(MiB);
  for (let left = n; left > 0; left -= MiB) {
    if (!gz.write(left >= MiB ? block : block.subarray(0, left)))
      await new Promise((r) => gz.once('drain', r));
  }
  gz.end();
  await ended;
  return Buffer.concat(out);
}

/** Whether `p` settles before the next macrotask: a memoized answer does, a worker round trip never. */
async function settlesAtOnce(p: Promise<unknown>): Promise<boolean> {
  const done = p.then(
    () => true,
    () => true,
  );
  return await Promise.race([done, new Promise<boolean>((r) => setImmediate(() => r(false)))]);
}

function chunk(extra: Partial<Chunk> & Pick<Chunk, 'size' | 'digest'>): Chunk {
  return { fileOffset: 0, compressedOffset: 0, compressedEnd: 0, innerOffset: 0, ...extra };
}

/**
 * Peak RSS growth while `fn` runs: sampled every 2 ms and from getrusage's high-water mark
 * (which catches spikes between samples).
 */
async function peakGrowth<T>(fn: () => Promise<T>): Promise<{ value: T; growthMiB: number }> {
  global.gc?.();
  const base = process.memoryUsage.rss();
  const maxBefore = process.resourceUsage().maxRSS * 1024;
  let peak = base;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 2);
  try {
    const value = await fn();
    peak = Math.max(peak, process.memoryUsage.rss());
    const maxAfter = process.resourceUsage().maxRSS * 1024;
    // a new high-water mark above the old one is growth caused while fn ran
    const hw = maxAfter > maxBefore ? maxAfter - base : 0;
    return { value, growthMiB: Math.max(peak - base, hw) / MiB };
  } finally {
    clearInterval(timer);
  }
}

describe('gzip spans are inflated only as far as the chunk needs', () => {
  it('a 1 GiB gzip bomb behind a 4 KiB chunk costs ~nothing and still verifies', async () => {
    // 16 gzip members of 64 MiB zeros each: ~1 MiB of span, 1 GiB if fully inflated
    const member = await gzipZeros(64 * MiB);
    const bomb = Buffer.concat(Array.from({ length: 16 }, () => member));
    expect(bomb.length).toBeLessThan(2 * MiB);
    await decodeChunk(
      'gzip',
      gzipSync(Buffer.from('warm up')),
      chunk({ size: 7, digest: sha(Buffer.from('warm up')) }),
    );
    const good = chunk({ size: 4096, digest: sha(Buffer.alloc(4096)) });
    const r1 = await peakGrowth(() => decodeChunk('gzip', bomb, good));
    expect(r1.value.equals(Buffer.alloc(4096))).toBe(true);
    // a chunk deep inside the bomb: only innerOffset + size bytes are produced
    const deep = chunk({ size: 4096, innerOffset: 70 * MiB, digest: sha(Buffer.alloc(4096)) });
    const r2 = await peakGrowth(() => decodeChunk('gzip', bomb, deep));
    expect(r2.value.equals(Buffer.alloc(4096))).toBe(true);
    // a lying digest: rejected, equally bounded
    const lie = chunk({ size: 4096, digest: sha(Buffer.from('something else')) });
    const r3 = await peakGrowth(() => decodeChunk('gzip', bomb, lie).catch((e: unknown) => e));
    expect(r3.value).toBeInstanceOf(DigestMismatchError);
    console.log(
      `gzip bomb (1 GiB in ${bomb.length} bytes): RSS growth ${r1.growthMiB.toFixed(0)} / ` +
        `${r2.growthMiB.toFixed(0)} (70 MiB inner offset) / ${r3.growthMiB.toFixed(0)} MiB`,
    );
    expect(r1.growthMiB).toBeLessThan(64);
    expect(r3.growthMiB).toBeLessThan(64);
    // need is 70 MiB here: the bound is need plus a margin (inflate steps awaiting GC), not 1 GiB
    expect(r2.growthMiB).toBeLessThan(70 + 48);
  });

  it('members much longer than the chunk (shared members, header runs) still decode exactly', async () => {
    const head = randomBytes(10_000);
    const rest = Buffer.alloc(3 * MiB, 'tar header run ');
    const span = gzipSync(Buffer.concat([head, rest]));
    expect(
      (await decodeChunk('gzip', span, chunk({ size: head.length, digest: sha(head) }))).equals(head),
    ).toBe(true);
    // innerOffset into the long tail, across a member boundary
    const second = Buffer.alloc(2 * MiB, 'second member ');
    const two = Buffer.concat([span, gzipSync(second)]);
    const want = Buffer.concat([rest, second]).subarray(2 * MiB, 2 * MiB + 1_500_000);
    const c = chunk({ size: want.length, innerOffset: head.length + 2 * MiB, digest: sha(want) });
    expect((await decodeChunk('gzip', two, c)).equals(want)).toBe(true);
    // a member cut short before `need` is reached: typed error, never bytes
    const cut = two.subarray(0, span.length + 100);
    const err = await decodeChunk('gzip', cut, c).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect(['E_TRUNCATED', 'E_DECOMPRESS']).toContain((err as StoreError).code);
  });
});

describe('zeros chunks are verified without materialising them', () => {
  it('a 512 MiB hole: bounded memory, responsive event loop, checked once', async () => {
    const size = 512 * MiB;
    const c = chunk({ size, digest: zerosDigest(size), zeros: true });
    let maxLag = 0;
    let ticks = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      maxLag = Math.max(maxLag, now - last - 1);
      ticks++;
      last = now;
    }, 1);
    const t0 = performance.now();
    const r = await peakGrowth(() => verifyZeros(c));
    const firstMs = performance.now() - t0;
    clearInterval(timer);
    expect(isZerosVerified(c)).toBe(true);
    // checked once: the same chunk elsewhere in the file is answered from memory
    expect(await settlesAtOnce(verifyZeros({ ...c, fileOffset: 12345 }))).toBe(true);
    console.log(
      `512 MiB zeros chunk: first check ${firstMs.toFixed(0)} ms, ` +
        `RSS growth ${r.growthMiB.toFixed(0)} MiB, max event-loop lag ${maxLag.toFixed(1)} ms`,
    );
    expect(r.growthMiB).toBeLessThan(64);
    // hashing runs on a worker: the loop keeps turning (one synchronous hash would allow ~none);
    // lag is only logged, as a shared 2-core machine adds scheduling noise
    expect(ticks).toBeGreaterThanOrEqual(20);
  });

  it('a wrong digest on a huge zeros chunk is a DigestMismatchError with context', async () => {
    const size = 300 * MiB + 1;
    const wrong = sha(Buffer.from('not zeros'));
    const err = await verifyZeros(chunk({ size, digest: wrong, zeros: true, fileOffset: 8192 }), {
      path: 'var/sparse.img',
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DigestMismatchError);
    expect((err as DigestMismatchError).context).toMatchObject({
      path: 'var/sparse.img',
      offset: 8192,
      expected: wrong,
      actual: zerosDigest(size),
    });
    // the verdict is remembered: asking again does not hash 300 MiB again
    const asked = verifyZeros(chunk({ size, digest: wrong, zeros: true, fileOffset: 99 }));
    expect(await settlesAtOnce(asked)).toBe(true);
    const again = await asked.catch((e: unknown) => e);
    expect((again as DigestMismatchError).context).toMatchObject({
      offset: 99,
      actual: zerosDigest(size),
    });
    // decodeChunk keeps its whole-chunk contract but refuses sizes no Buffer can hold
    const huge = chunk({ size: 2 ** 33, digest: wrong, zeros: true });
    const e2 = await decodeChunk('zstd', Buffer.alloc(0), huge).catch((e: unknown) => e);
    expect((e2 as StoreError).code).toBe('E_TOO_LARGE');
  });
});
