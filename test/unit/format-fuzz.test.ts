/**
 * Property tests: whatever the bytes (random, mutated or truncated real blobs, random TOCs),
 * openLayer + readFileRange only ever throw StoreError, and any bytes they return verify.
 */
import { createHash } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import type { LayerIndex } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { readFileRange } from '../../src/format/read-file.js';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';
import { buildEStargz, estargzFooterBytes, skippableFrame } from '../helpers/format-builders.js';
import { loadBlob, SAMPLES_TINY, sha256, VECTOR_A, VECTOR_B } from '../helpers/format-fixtures.js';

/** Fail on anything that is not a StoreError. */
async function typedOnly<T>(p: Promise<T>): Promise<T | StoreError> {
  try {
    return await p;
  } catch (err) {
    if (err instanceof StoreError) return err;
    throw new Error(`untyped error escaped: ${err instanceof Error ? err.stack : String(err)}`);
  }
}

/**
 * Open, then read every regular file whole. Returned bytes must hash, chunk by chunk, to the
 * digests of the (possibly mutated) TOC — no unverified byte ever comes out.
 */
const stats = { opened: 0, filesRead: 0 };

async function exercise(blob: Buffer, maxFileBytes = Infinity): Promise<void> {
  const reader = new BufferRangeReader(blob);
  const index = await typedOnly(openLayer(reader));
  if (index instanceof StoreError) return;
  stats.opened++;
  checkModel(index);
  for (const node of index.nodes) {
    if (node === undefined || node.type !== 'reg' || node.size > maxFileBytes) continue;
    const data = await typedOnly(readFileRange(reader, index, node, 0, node.size));
    if (data instanceof StoreError) continue;
    expect(data.length).toBe(node.size);
    if (node.size > 0) stats.filesRead++;
    for (const c of node.chunks) {
      const got =
        'sha256:' +
        createHash('sha256')
          .update(data.subarray(c.fileOffset, c.fileOffset + c.size))
          .digest('hex');
      expect(got).toBe(c.digest);
    }
  }
}

/** Model invariants promised by model.ts. */
function checkModel(index: LayerIndex): void {
  expect(index.root.id).toBe(1);
  for (const node of index.nodes) {
    if (node === undefined) continue;
    expect(index.nodes[node.id]).toBe(node);
    expect(node.path.startsWith('/') || node.path.split('/').includes('..')).toBe(false);
    let expected = 0;
    for (const c of node.chunks) {
      expect(c.fileOffset).toBe(expected);
      expect(c.size).toBeGreaterThan(0);
      expect(c.compressedEnd).toBeLessThanOrEqual(index.dataEnd);
      if (!c.zeros) expect(c.compressedEnd).toBeGreaterThan(c.compressedOffset);
      expected += c.size;
    }
    if (node.type === 'reg') expect(expected).toBe(node.size);
  }
}

const mutation = (size: number) =>
  fc.record({
    flips: fc.array(fc.record({ at: fc.nat({ max: size - 1 }), xor: fc.integer({ min: 1, max: 255 }) }), {
      maxLength: 6,
    }),
    truncate: fc.option(fc.nat({ max: size }), { nil: undefined }),
    append: fc.option(fc.uint8Array({ maxLength: 80 }), { nil: undefined }),
  });

function mutate(
  buf: Buffer,
  m: { flips: { at: number; xor: number }[]; truncate?: number; append?: Uint8Array },
) {
  let out = Buffer.from(buf);
  for (const { at, xor } of m.flips) out[at] = out[at]! ^ xor;
  if (m.truncate !== undefined) out = out.subarray(0, m.truncate);
  if (m.append !== undefined) out = Buffer.concat([out, m.append]);
  return out;
}

describe('property: only StoreError, only verified bytes', () => {
  test('random bytes, alone or in front of valid-looking footers', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ maxLength: 600 }),
        fc.nat({ max: 700 }),
        fc.nat({ max: 3 }),
        async (bytes, off, kind) => {
          const body = Buffer.from(bytes);
          let blob = body;
          if (kind === 1) blob = Buffer.concat([body, estargzFooterBytes(off)]);
          if (kind === 2) {
            const p = Buffer.alloc(40);
            p.writeBigUInt64LE(BigInt(off), 0);
            p.writeBigUInt64LE(BigInt(Math.max(1, body.length - off)), 8);
            p.writeBigUInt64LE(BigInt(bytes[0] ?? 1), 16);
            p.writeBigUInt64LE(1n, 24);
            p.write('GnUlInUx', 32, 'latin1');
            blob = Buffer.concat([body, skippableFrame(p)]);
          }
          await exercise(blob);
        },
      ),
      { numRuns: 400 },
    );
  });

  for (const [name, path] of [
    ['vector A', VECTOR_A],
    ['vector B', VECTOR_B],
  ] as const) {
    test(`mutated/truncated ${name}`, async () => {
      const { buf } = await loadBlob(path);
      await exercise(buf); // the unmutated blob passes
      await fc.assert(
        fc.asyncProperty(mutation(buf.length), async (m) => exercise(mutate(buf, m))),
        { numRuns: 400 },
      );
    });
  }

  for (const dir of ['estargz', 'zstd-chunked']) {
    test(`mutated sample blob (${dir} layer1), mostly in the TOC region`, async () => {
      const d = join(SAMPLES_TINY, dir);
      const file = (await readdir(d)).find((f) => f.startsWith('layer1-'))!;
      const { buf } = await loadBlob(join(d, file));
      const tailStart = buf.length - 12_000;
      const focused = fc.record({
        flips: fc.array(
          fc.record({
            at: fc.oneof(
              fc.integer({ min: tailStart, max: buf.length - 1 }),
              fc.nat({ max: buf.length - 1 }),
            ),
            xor: fc.integer({ min: 1, max: 255 }),
          }),
          { maxLength: 3 },
        ),
        truncate: fc.option(fc.integer({ min: tailStart, max: buf.length }), { nil: undefined, freq: 5 }),
      });
      // files up to 300 KB are read whole (big.bin's 4.5 MiB once is enough, in format-samples)
      await fc.assert(
        fc.asyncProperty(focused, async (m) => exercise(mutate(buf, m), 300_000)),
        { numRuns: 40 },
      );
    });
  }

  test('random TOCs over real members: typed errors or a consistent, verifying tree', async () => {
    const payloads = ['abcd', 'efgh', 'ij', '\x0f', 'hello\n'].map((s) => Buffer.from(s));
    const digests = [...payloads.map((p) => sha256(p)), sha256('x'), 'sha256:zz', ''];
    const name = fc
      .array(fc.constantFrom('a', 'b', '.', '..', '', 'c.txt', '.prefetch.landmark', '.wh.x', '\0', 'ü'), {
        minLength: 1,
        maxLength: 4,
      })
      .map((parts) => parts.join('/'));
    const num = fc.oneof(
      fc.nat({ max: 12 }),
      fc.integer({ min: -3, max: 3000 }),
      fc.constant(1.5),
      fc.constant(2 ** 60),
    );
    // offsets of the members are fixed by the payloads, so compute them once
    const offsets = buildEStargz(payloads, () => ({ entries: [] })).offsets;
    const random = fc.record(
      {
        name,
        type: fc.constantFrom('dir', 'reg', 'symlink', 'hardlink', 'char', 'block', 'fifo', 'chunk', 'sock'),
        size: num,
        offset: fc.oneof(fc.constantFrom(...offsets), num),
        innerOffset: num,
        endOffset: fc.oneof(fc.constantFrom(...offsets), num),
        chunkOffset: num,
        chunkSize: num,
        chunkDigest: fc.constantFrom(...digests),
        digest: fc.constantFrom(...digests),
        linkName: name,
        mode: num,
        uid: num,
        chunkType: fc.constantFrom('', 'zeros', 'holes'),
        modtime: fc.constantFrom('2020-01-02T03:04:05Z', '0001-01-01T00:00:00Z', 'junk'),
        xattrs: fc.constantFrom({ 'user.a': 'dg==' }, { 'user.a': '%%' }, {}),
      },
      { requiredKeys: ['name', 'type'] },
    );
    // mostly-valid entries (so the tree builder and the read path are reached), sometimes
    // with one field replaced by a random value
    const perturb = (entries: Record<string, unknown>[]) =>
      fc.tuple(fc.nat({ max: 9 }), fc.nat(), random).map(([p, which, r]) => {
        if (p > 2 || entries.length === 0) return entries;
        const keys = Object.keys(r);
        const key = keys[which % keys.length]!;
        return entries.map((e, i) =>
          i === which % entries.length ? { ...e, [key]: (r as Record<string, unknown>)[key] } : e,
        );
      });
    const file = fc
      .tuple(name, fc.nat({ max: payloads.length - 1 }), fc.boolean())
      .map(([n, i, inner]) => [
        {
          name: n,
          type: 'reg',
          size: payloads[i]!.length - (inner ? 1 : 0),
          offset: offsets[i],
          ...(inner ? { innerOffset: 1 } : {}),
          chunkDigest: inner ? sha256(payloads[i]!.subarray(1)) : digests[i],
        },
      ])
      .chain(perturb);
    const chunked = name
      .map((n) => [
        { name: n, type: 'reg', size: 10, offset: offsets[0], chunkSize: 4, chunkDigest: digests[0] },
        { name: n, type: 'chunk', offset: offsets[1], chunkOffset: 4, chunkSize: 4, chunkDigest: digests[1] },
        { name: n, type: 'chunk', offset: offsets[2], chunkOffset: 8, chunkDigest: digests[2] },
      ])
      .chain(perturb);
    const other = fc
      .tuple(name, name, fc.constantFrom('dir', 'symlink', 'hardlink', 'fifo', 'char'))
      .map(([n, target, type]) => [{ name: n, type, linkName: target, mode: 0o40755, devMajor: 1 }])
      .chain(perturb);
    const toc = fc
      .array(
        fc.oneof(
          { arbitrary: file, weight: 4 },
          chunked,
          other,
          random.map((r) => [r]),
        ),
        { maxLength: 8 },
      )
      .map((groups) => groups.flat());
    stats.opened = stats.filesRead = 0;
    await fc.assert(
      fc.asyncProperty(toc, async (entries) => {
        const { blob } = buildEStargz(payloads, () => ({ version: 1, entries }));
        await exercise(blob);
      }),
      { numRuns: 1500 },
    );
    // the generator must reach the tree builder and the read path, not only early rejections
    expect(stats.opened).toBeGreaterThan(150);
    expect(stats.filesRead).toBeGreaterThan(80);
  });
});
