import { createHash, randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { decodeChunk, decodeChunks } from '../../src/format/codec.js';
import { StreamDigest } from '../../src/layer/diffid.js';
import { GcPacer, gcPacer } from '../../src/util/gc-pacer.js';

const sha = (b: Uint8Array): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

describe('GcPacer', () => {
  it('collects once per paced amount of bytes and starts counting again after', () => {
    const collect = vi.fn();
    const p = new GcPacer(100, collect);
    p.note(60);
    expect(collect).not.toHaveBeenCalled();
    expect(p.pending).toBe(60);
    p.note(40);
    expect(collect).toHaveBeenCalledTimes(1);
    expect(p.pending).toBe(0);
    p.note(99);
    expect(collect).toHaveBeenCalledTimes(1);
    p.note(250); // one large allocation: one collection, not one per 100 bytes
    expect(collect).toHaveBeenCalledTimes(2);
  });

  it('bytes given back need no collection: they come off the count, down to one pace of credit', () => {
    const collect = vi.fn();
    const p = new GcPacer(100, collect);
    p.note(80);
    p.gaveBack(50); // released by the store itself
    p.note(60);
    expect(collect).not.toHaveBeenCalled(); // 90 counted, not 140
    p.note(10);
    expect(collect).toHaveBeenCalledTimes(1);
    // released after the collection that counted them: a credit, bounded by one pace
    p.gaveBack(500);
    expect(p.pending).toBe(-100);
    expect(p.collectPending()).toBe(false); // nothing left to collect
    p.note(150);
    expect(collect).toHaveBeenCalledTimes(1);
    p.note(50);
    expect(collect).toHaveBeenCalledTimes(2);
  });

  it('collectPending collects only bytes counted since the last collection, then counts afresh', () => {
    const collect = vi.fn();
    const p = new GcPacer(100, collect);
    expect(p.collectPending()).toBe(false); // nothing counted: no pause for nothing
    p.note(30);
    expect(p.collectPending()).toBe(true);
    expect(collect).toHaveBeenCalledTimes(1);
    expect(p.pending).toBe(0);
    expect(p.collectPending()).toBe(false);
    p.note(99);
    expect(collect).toHaveBeenCalledTimes(1); // the pace starts again from zero
    expect(new GcPacer(100, undefined).collectPending()).toBe(false); // no gc exposed
  });

  it('waits for half a live heap of bytes when the heap is large (a full GC costs in proportion to it)', () => {
    const collect = vi.fn();
    let heap = 1000;
    const p = new GcPacer(100, collect, () => heap);
    p.note(300);
    expect(collect).not.toHaveBeenCalled(); // 300 of the 500 a 1000-byte heap asks for
    p.note(200);
    expect(collect).toHaveBeenCalledTimes(1);
    heap = 50; // small heap again: the pace itself rules
    p.note(100);
    expect(collect).toHaveBeenCalledTimes(2);
  });

  it('reads the heap size only when the count reaches the pace, not on every call', () => {
    const collect = vi.fn();
    const heapBytes = vi.fn(() => 1000);
    const p = new GcPacer(100, collect, heapBytes);
    for (let i = 0; i < 99; i++) p.note(1);
    expect(heapBytes).not.toHaveBeenCalled();
    for (let i = 0; i < 401; i++) p.note(1); // 100 -> looks once (due 500), 500 -> looks again
    expect(heapBytes).toHaveBeenCalledTimes(2);
    expect(collect).toHaveBeenCalledTimes(1);
  });

  it('ignores empty and nonsense sizes', () => {
    const collect = vi.fn();
    const p = new GcPacer(10, collect);
    for (const n of [0, -5, Number.NaN]) p.note(n);
    expect(p.pending).toBe(0);
    expect(collect).not.toHaveBeenCalled();
  });

  it('does nothing without a collector (gc not exposed)', () => {
    const p = new GcPacer(1, undefined);
    p.note(1 << 30);
    expect(p.pending).toBe(0);
  });
});

describe('decoding paces collections by the bytes it allocates', () => {
  afterEach(() => vi.restoreAllMocks());

  it('counts the compressed span and the decoded bytes of each decompression', async () => {
    const noted: number[] = [];
    vi.spyOn(gcPacer, 'note').mockImplementation((n: number) => void noted.push(n));
    const data = randomBytes(200_000);
    const span = gzipSync(data);
    const out = await decodeChunk('gzip', span, {
      fileOffset: 0,
      size: data.length,
      compressedOffset: 0,
      compressedEnd: span.length,
      innerOffset: 0,
      digest: sha(data),
    });
    expect(out.equals(data)).toBe(true);
    expect(noted).toEqual([span.length + data.length]);
  });

  it('counts a member shared by several chunks once', async () => {
    const noted: number[] = [];
    vi.spyOn(gcPacer, 'note').mockImplementation((n: number) => void noted.push(n));
    const a = randomBytes(3000);
    const b = randomBytes(5000);
    const span = gzipSync(Buffer.concat([a, b]));
    const base = { fileOffset: 0, compressedOffset: 0, compressedEnd: span.length };
    const got = await decodeChunks('gzip', span, [
      { ...base, size: a.length, innerOffset: 0, digest: sha(a) },
      { ...base, size: b.length, innerOffset: a.length, digest: sha(b) },
    ]);
    expect(got[0]).toEqual(a);
    expect(got[1]).toEqual(b);
    expect(noted).toEqual([span.length + a.length + b.length]);
  });

  it("counts the DiffID check's decoded whole-layer stream", async () => {
    const noted: number[] = [];
    vi.spyOn(gcPacer, 'note').mockImplementation((n: number) => void noted.push(n));
    const data = randomBytes(1_500_000);
    const s = new StreamDigest('gzip');
    await s.write(gzipSync(data));
    const r = await s.end();
    expect(r.digest).toBe(sha(data));
    expect(noted.reduce((a, n) => a + n, 0)).toBe(data.length);
  });
});
