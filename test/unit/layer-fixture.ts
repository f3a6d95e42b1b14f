/**
 * Synthetic lazy-layer fixtures for the engine's unit tests: a blob made of one gzip member /
 * zstd frame per chunk (optionally several small files sharing a member via innerOffset, like
 * eStargz MinChunkSize), plus the LayerIndex a reader would produce for it. The expected bytes of
 * every file and the expected DiffID are computed here from the plain inputs, independently of
 * the code under test.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { gzipSync } from 'node:zlib';
import type { Chunk, LayerIndex, PrefetchHint, TreeNode } from '../../src/format/model.js';
import { StoreError } from '../../src/util/errors.js';
import { spanBuffers } from '../../src/util/span-buffers.js';
import type { BlobSource, ByteRange, ReadRangesOptions } from '../../src/layer/types.js';
import type { LocalCompressedStore } from '../../src/layer/compressed-store.js';
import { expect } from 'vitest';

const zstd = createRequire(import.meta.url)('zstd-napi') as { compress(b: Uint8Array): Buffer };

export interface FixtureFileSpec {
  path: string;
  content: Buffer;
  chunkSize: number;
  /** Put this (small, single-chunk) file into the member of the previous shared file. */
  shareMember?: boolean;
  /** Mark chunks made only of zero bytes as `zeros` (zstd:chunked style). */
  zeroChunks?: boolean;
}

export interface Fixture {
  index: LayerIndex;
  blob: Buffer;
  files: Map<string, Buffer>;
  nodes: Map<string, TreeNode>;
  diffID: string;
  /** Length of the decompressed stream the DiffID is computed over. */
  uncompressedSize: number;
  /** The decompressed stream itself. */
  stream: Buffer;
  /** Compressed member boundaries, in order. */
  members: Array<{ offset: number; end: number }>;
}

export function sha256(b: Buffer): string {
  return 'sha256:' + createHash('sha256').update(b).digest('hex');
}

function node(id: number, path: string, type: 'dir' | 'reg', size: number, chunks: Chunk[]): TreeNode {
  const name = path.split('/').pop() ?? '';
  return {
    id,
    name,
    path,
    type,
    mode: type === 'dir' ? 0o755 : 0o644,
    uid: 0,
    gid: 0,
    mtime: 0,
    size,
    linkName: '',
    devMajor: 0,
    devMinor: 0,
    xattrs: new Map(),
    chunks,
    nlink: type === 'dir' ? 2 : 1,
    ...(type === 'dir' ? { children: new Map<string, TreeNode>() } : {}),
  };
}

export function buildFixture(
  specs: FixtureFileSpec[],
  compression: 'gzip' | 'zstd',
  prefetch: PrefetchHint = { kind: 'none' },
): Fixture {
  const compress = (b: Buffer): Buffer => (compression === 'gzip' ? gzipSync(b) : zstd.compress(b));
  // Members as lists of plain pieces; chunk descriptors refer to a member index.
  const memberPlain: Buffer[][] = [];
  const pending: Array<{
    spec: FixtureFileSpec;
    chunks: Array<Omit<Chunk, 'compressedOffset' | 'compressedEnd'> & { member: number }>;
  }> = [];
  // A leading "header" member, like the tar headers before the first payload.
  memberPlain.push([randomBytes(512)]);
  for (const spec of specs) {
    const chunks: Array<Omit<Chunk, 'compressedOffset' | 'compressedEnd'> & { member: number }> = [];
    for (let off = 0; off < spec.content.length; off += spec.chunkSize) {
      const piece = spec.content.subarray(off, Math.min(spec.content.length, off + spec.chunkSize));
      const digest = sha256(piece);
      if (spec.zeroChunks && piece.every((x) => x === 0)) {
        memberPlain.push([Buffer.alloc(0)]);
        chunks.push({
          fileOffset: off,
          size: piece.length,
          innerOffset: 0,
          digest,
          zeros: true,
          member: memberPlain.length - 1,
        });
        continue;
      }
      if (spec.shareMember && off === 0 && memberPlain.length > 1) {
        const m = memberPlain[memberPlain.length - 1]!;
        const inner = m.reduce((n, b) => n + b.length, 0);
        m.push(piece);
        chunks.push({
          fileOffset: off,
          size: piece.length,
          innerOffset: inner,
          digest,
          member: memberPlain.length - 1,
        });
      } else {
        memberPlain.push([piece]);
        chunks.push({
          fileOffset: off,
          size: piece.length,
          innerOffset: 0,
          digest,
          member: memberPlain.length - 1,
        });
      }
    }
    pending.push({ spec, chunks });
  }
  // A trailing "TOC" member so the blob does not end with data.
  memberPlain.push([randomBytes(700)]);
  const parts: Buffer[] = [];
  const members: Array<{ offset: number; end: number }> = [];
  let pos = 0;
  for (const m of memberPlain) {
    const c = compress(Buffer.concat(m));
    members.push({ offset: pos, end: pos + c.length });
    parts.push(c);
    pos += c.length;
  }
  const blob = Buffer.concat(parts);
  const plainStream = Buffer.concat(memberPlain.flat());
  const diffID = sha256(plainStream);

  const root = node(1, '', 'dir', 0, []);
  const nodes: TreeNode[] = [root, root];
  nodes[0] = undefined as unknown as TreeNode;
  const byPath = new Map<string, TreeNode>();
  const files = new Map<string, Buffer>();
  for (const { spec, chunks } of pending) {
    const full: Chunk[] = chunks.map(({ member, ...c }) => ({
      ...c,
      compressedOffset: members[member]!.offset,
      compressedEnd: members[member]!.end,
    }));
    const n = node(nodes.length, spec.path, 'reg', spec.content.length, full);
    nodes.push(n);
    (root.children as Map<string, TreeNode>).set(spec.path, n);
    byPath.set(spec.path, n);
    files.set(spec.path, spec.content);
  }
  const index: LayerIndex = {
    format: compression === 'gzip' ? 'estargz' : 'zstd:chunked',
    compression,
    blobSize: blob.length,
    tocOffset: members[members.length - 1]!.offset,
    tocDigest: sha256(Buffer.from('toc')),
    tocJsonDigest: sha256(Buffer.from('toc')),
    root,
    nodes,
    prefetch,
    dataEnd: members[members.length - 1]!.offset,
  };
  return {
    index,
    blob,
    files,
    nodes: byPath,
    diffID,
    uncompressedSize: plainStream.length,
    stream: plainStream,
    members,
  };
}

/** A mix of file shapes: empty, tiny (shared members), multi-chunk, exact multiples, zero runs. */
export function mixedSpecs(chunkSize: number): FixtureFileSpec[] {
  const specs: FixtureFileSpec[] = [];
  specs.push({ path: 'empty', content: Buffer.alloc(0), chunkSize });
  for (let i = 0; i < 6; i++) {
    specs.push({ path: `small${i}`, content: randomBytes(1 + i * 37), chunkSize, shareMember: i > 0 });
  }
  specs.push({ path: 'exact', content: randomBytes(chunkSize * 3), chunkSize });
  specs.push({ path: 'big', content: randomBytes(chunkSize * 9 + 123), chunkSize });
  const sparse = Buffer.concat([randomBytes(chunkSize), Buffer.alloc(chunkSize * 2), randomBytes(77)]);
  specs.push({ path: 'sparse', content: sparse, chunkSize, zeroChunks: true });
  // the same content as 'exact' -> identical chunk digests shared across files
  specs.push({ path: 'dup', content: specs.find((s) => s.path === 'exact')!.content, chunkSize });
  return specs;
}

/** In-memory blob source that counts requests and can delay, block or corrupt them. */
export class TestSource implements BlobSource {
  requests: ByteRange[][] = [];
  /** Per request: whether the caller asked to bypass caches (`opts.bypassCache`). */
  fresh: boolean[] = [];
  bytes = 0;
  delayMs = 0;
  gate: Promise<void> | undefined;
  /** Compressed byte offsets whose value is flipped when served. */
  corrupt = new Set<number>();
  private readonly withRanges: boolean;

  constructor(
    private readonly blob: Buffer,
    opts: { multiRange?: boolean } = {},
  ) {
    this.withRanges = opts.multiRange ?? true;
  }

  get size(): number {
    return this.blob.length;
  }

  get requestCount(): number {
    return this.requests.length;
  }

  private async serve(r: ByteRange, signal?: AbortSignal): Promise<Buffer> {
    if (r.offset < 0 || r.offset + r.length > this.blob.length) {
      throw new StoreError('E_TRUNCATED', 'range beyond blob', { offset: r.offset });
    }
    const out = Buffer.from(this.blob.subarray(r.offset, r.offset + r.length));
    for (const c of this.corrupt)
      if (c >= r.offset && c < r.offset + r.length) out[c - r.offset] = out[c - r.offset]! ^ 0x5a;
    if (signal?.aborted) throw new StoreError('E_ABORTED', 'aborted');
    return out;
  }

  private async wait(signal?: AbortSignal): Promise<void> {
    if (this.delayMs > 0) {
      // like a socket: an abort ends the wait at once
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(resolve, this.delayMs);
        signal?.addEventListener('abort', () => {
          clearTimeout(t);
          reject(new StoreError('E_ABORTED', 'aborted'));
        });
      });
    }
    if (this.gate !== undefined) await this.gate;
    if (signal?.aborted) throw new StoreError('E_ABORTED', 'aborted');
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Buffer> {
    return (await this.readOne({ offset, length }, { signal }))!;
  }

  /** One single-range request (what the single-read fallback issues per range). */
  protected async readOne(r: ByteRange, opts: ReadRangesOptions): Promise<Buffer> {
    this.requests.push([{ offset: r.offset, length: r.length }]);
    this.fresh.push(opts.bypassCache === true);
    this.bytes += r.length;
    await this.wait(opts.signal);
    return await this.serve(r, opts.signal);
  }

  async readRanges(ranges: readonly ByteRange[], opts: ReadRangesOptions): Promise<Buffer[]> {
    if (!this.withRanges || ranges.length === 1) {
      // a source without multi-range requests: one request per range, in parallel
      return await Promise.all(ranges.map((r) => this.readOne(r, opts)));
    }
    this.requests.push(ranges.map((r) => ({ offset: r.offset, length: r.length })));
    this.fresh.push(opts.bypassCache === true);
    for (const r of ranges) this.bytes += r.length;
    await this.wait(opts.signal);
    return await Promise.all(ranges.map((r) => this.serve(r, opts.signal)));
  }
}

/** The resume helper's store, as far as the engine can tell: received bytes, by offset. */
export class MemoryLocalBytes implements LocalCompressedStore {
  readonly received: Array<{ offset: number; data: Buffer }> = [];
  reads = 0;
  readonly bytes: Buffer;
  readonly have: Uint8Array;

  constructor(size: number) {
    this.bytes = Buffer.alloc(size);
    this.have = new Uint8Array(size);
  }

  readonly onCompressedBytes = (offset: number, data: Buffer): void => {
    this.received.push({ offset, data: Buffer.from(data) });
    data.copy(this.bytes, offset);
    this.have.fill(1, offset, offset + data.length);
  };

  covered(offset: number, length: number): boolean {
    for (let i = offset; i < offset + length; i++) if (this.have[i] !== 1) return false;
    return true;
  }

  held(offset: number, length: number): ByteRange[] {
    const out: ByteRange[] = [];
    for (let i = offset; i < offset + length; i++) {
      if (this.have[i] !== 1) continue;
      const last = out[out.length - 1];
      if (last !== undefined && last.offset + last.length === i) last.length++;
      else out.push({ offset: i, length: 1 });
    }
    return out;
  }

  /** Like cache/local-blob.ts: a buffer from span-buffers, which its reader may give back. */
  async read(offset: number, length: number): Promise<Buffer> {
    this.reads++;
    const out = spanBuffers.take(length);
    this.bytes.copy(out, 0, offset, offset + length);
    return out;
  }

  /** Each byte received at most once, and every byte of [0, size) received. */
  expectEachByteOnce(size: number): void {
    const count = new Uint8Array(size);
    for (const r of this.received) for (let i = 0; i < r.data.length; i++) count[r.offset + i]!++;
    expect(count.every((n) => n === 1)).toBe(true);
  }
}
