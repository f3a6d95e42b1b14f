/**
 * The TOC pipeline, in one streaming pass on the calling thread: decompress (eStargz: the TOC
 * gzip member, its tar header skipped; zstd:chunked: the manifest frame) -> sha256 of the JSON
 * -> scan the JSON into entry batches (toc-scan.ts) -> validate entries (toc.ts) -> tree
 * (toc-tree.ts). Nothing holds the whole JSON or a list of all entries; the entry cap and the
 * decompressed-size cap stop the pass as soon as they are crossed; the event loop gets a turn
 * every few milliseconds. The result is an UnverifiedToc: usable only once its digest matches.
 */
import { createHash, type Hash } from 'node:crypto';
import { createRequire } from 'node:module';
import { createInflateRaw, crc32, zstdCompressSync } from 'node:zlib';
import { DigestMismatchError, StoreError } from '../util/errors.js';
import { sha256Async } from './codec.js';
import { parseGzipHeader } from './estargz/gzip.js';
import { checkTocEntry, findTarEntry, HEAD_BYTES, TAR_OVERHEAD } from './estargz/toc-member.js';
import type { LayerFormat, LayerIndex } from './model.js';
import { checkTopLevel, parseEntry, Slicer, type ParseTurns } from './toc.js';
import { TocScanner } from './toc-scan.js';
import { TreeBuilder } from './toc-tree.js';
import { UnverifiedToc } from './unverified-toc.js';

interface DCtx {
  decompressStream(dst: Uint8Array, src: Uint8Array): [ret: number, produced: number, consumed: number];
}
const require = createRequire(import.meta.url);
const zstdBinding = require('zstd-napi/binding') as { DCtx: new () => DCtx };

/** Decompressed bytes handed to the scanner at a time. */
const WINDOW = 128 * 1024;
/** Compressed bytes given to zstd per call. */
const ZSTD_STEP = 64 * 1024;

export interface TocBytes {
  format: LayerFormat;
  blobSize: number;
  tocOffset: number;
  dataEnd: number;
  /** eStargz: the TOC gzip member (exactly one member; bytes after its trailer are ignored). */
  member?: Buffer;
  /** zstd:chunked: the compressed manifest and its announced uncompressed length. */
  manifest?: { compressed: Buffer; uncompressedLength: number };
}

export interface ReadTocOptions {
  /** Most entries (chunk entries included): more -> E_TOO_MANY_ENTRIES within one piece of the cap. */
  maxEntries: number;
  /** Largest TOC JSON: more -> E_TOC_TOO_LARGE, before it is decompressed further. */
  maxTocBytes: number;
  /**
   * The digest the caller will verify against. Only used to report a mismatch rather than a
   * parse error when the TOC bytes are simply not the promised ones.
   */
  expectedTocDigest?: string;
  signal?: AbortSignal;
  /** Whose turn it is to parse (the store's ordering of concurrent resolutions). */
  turns?: ParseTurns;
}

/** Feeds JSON bytes through hash, scanner, entry validation and tree builder. */
class JsonSink {
  readonly hash: Hash = createHash('sha256');
  private readonly slicer: Slicer;
  private readonly queue: Array<{ raw: unknown[]; first: number }> = [];
  private readonly scanner: TocScanner;
  readonly builder: TreeBuilder;
  bytes = 0;
  /** A parse error held back until the digest is known (see ReadTocOptions.expectedTocDigest). */
  failure: unknown;

  constructor(
    private readonly opts: ReadTocOptions,
    dataEnd: number,
    private readonly deferErrors: boolean,
  ) {
    const turns = opts.turns;
    this.slicer = new Slicer(undefined, turns === undefined ? undefined : () => turns.pause());
    this.builder = new TreeBuilder({ dataEnd });
    this.scanner = new TocScanner(opts.maxEntries, (raw, first) => this.queue.push({ raw, first }));
  }

  async push(piece: Buffer): Promise<void> {
    this.bytes += piece.length;
    if (this.bytes > this.opts.maxTocBytes) {
      throw new StoreError(
        'E_TOC_TOO_LARGE',
        `TOC JSON exceeds the limit of ${this.opts.maxTocBytes} bytes`,
        {
          limit: this.opts.maxTocBytes,
        },
      );
    }
    this.hash.update(piece);
    if (this.failure !== undefined) return; // only hashing now
    try {
      this.scanner.push(piece);
      await this.drain();
    } catch (err) {
      this.fail(err);
    }
    await this.slicer.tick();
    if (this.opts.signal?.aborted) throw new StoreError('E_ABORTED', 'aborted while reading the TOC');
  }

  private async drain(): Promise<void> {
    for (let b = this.queue.shift(); b !== undefined; b = this.queue.shift()) {
      const { raw, first } = b;
      for (let i = 0; i < raw.length; i++) {
        if ((i & 63) === 63) await this.slicer.tick();
        this.builder.add(parseEntry(raw[i], first + i));
      }
    }
  }

  private fail(err: unknown): void {
    // caps are refusals by design: never worth reading further (how far we read is in the error)
    if (err instanceof StoreError && (err.code === 'E_TOO_MANY_ENTRIES' || err.code === 'E_TOC_TOO_LARGE')) {
      throw new StoreError(err.code, err.message, { ...err.context, jsonBytesRead: this.bytes });
    }
    if (!this.deferErrors || !(err instanceof StoreError)) throw err;
    this.failure = err;
    this.queue.length = 0;
  }

  /** All JSON bytes seen: finish the tree (or report the held-back failure). */
  async end(): Promise<{
    jsonDigest: string;
    index: Omit<
      LayerIndex,
      'format' | 'compression' | 'blobSize' | 'tocOffset' | 'dataEnd' | 'tocDigest' | 'tocJsonDigest'
    > & { tarSplitDigest?: string };
  }> {
    const jsonDigest = 'sha256:' + this.hash.digest('hex');
    const expected = this.opts.expectedTocDigest;
    if (this.failure !== undefined) {
      if (expected !== undefined && expected !== jsonDigest) {
        throw new DigestMismatchError('toc', expected, jsonDigest, { tocJsonDigest: jsonDigest });
      }
      throw this.failure;
    }
    const top = this.scanner.end();
    const fields = checkTopLevel(top.version, top.tarSplitDigest);
    const tree = await this.builder.finish(this.slicer);
    const out: {
      root: LayerIndex['root'];
      nodes: LayerIndex['nodes'];
      prefetch: LayerIndex['prefetch'];
      tarSplitDigest?: string;
    } = {
      root: tree.root,
      nodes: tree.nodes,
      prefetch: tree.prefetch,
    };
    if (fields.tarSplitDigest !== undefined) out.tarSplitDigest = fields.tarSplitDigest;
    return { jsonDigest, index: out };
  }
}

/**
 * Read, hash and parse a TOC. Throws E_BAD_TOC / E_HOSTILE_PATH (content), E_TOC_TOO_LARGE /
 * E_TOO_MANY_ENTRIES (caps, early), E_TOC_DIGEST_MISMATCH (content that does not parse and is
 * not the expected TOC either), E_ABORTED.
 */
export async function readToc(src: TocBytes, opts: ReadTocOptions): Promise<UnverifiedToc> {
  let manifestChecksum: string | undefined;
  if (src.manifest !== undefined) {
    manifestChecksum = await sha256Async(src.manifest.compressed);
  }
  // zstd:chunked: the usual TOC key is the compressed bytes' digest, known before parsing
  const knownBefore = manifestChecksum !== undefined && opts.expectedTocDigest === manifestChecksum;
  const sink = new JsonSink(opts, src.dataEnd, opts.expectedTocDigest !== undefined && !knownBefore);
  if (src.member !== undefined) await inflateTocMember(src.member, sink, opts);
  else if (src.manifest !== undefined) await decompressManifestInto(src.manifest, sink, opts.signal);
  else throw new StoreError('E_BAD_TOC', 'no TOC bytes');
  const { jsonDigest, index } = await sink.end();
  return new UnverifiedToc({
    format: src.format,
    compression: src.format === 'estargz' ? 'gzip' : 'zstd',
    blobSize: src.blobSize,
    tocOffset: src.tocOffset,
    dataEnd: src.dataEnd,
    tocDigest: manifestChecksum ?? jsonDigest,
    tocJsonDigest: jsonDigest,
    ...(manifestChecksum !== undefined ? { manifestChecksum } : {}),
    ...index,
  });
}

/**
 * Run the pipeline (scanner, entry checks, tree; the zstd:chunked manifest decoder too) over
 * synthetic TOCs of `entries` entries shaped like real ones -- eStargz entries and
 * containers/storage ones (endOffset, chunk entries, zeros chunks, ignored keys) -- and throw the
 * results away. A store's first layers otherwise arrive while V8 still interprets these loops or
 * has compiled them for one entry shape only: measured in one process, the first resolution of a
 * sample layer took 84 ms against 58 for the next ones; a fresh store parsed the lab's
 * zstd:chunked model layer in 38-87 ms against 28 warm. The store runs this once before it
 * mounts, so the first client lookup meets compiled code.
 */
export async function warmUpTocPipeline(entries = 250, rounds = 16): Promise<void> {
  for (let r = 0; r < rounds; r++) await warmUpOnce(entries, r % 2 === 0 ? 'estargz' : 'cstorage');
}

async function warmUpOnce(entries: number, style: 'estargz' | 'cstorage'): Promise<void> {
  const sink = new JsonSink({ maxEntries: entries * 4, maxTocBytes: 64 << 20 }, 1 << 30, false);
  const hex = (n: number): string => n.toString(16).padStart(64, '0');
  const parts: string[] = [];
  let offset = 0;
  for (let i = 0; i < entries; i++) {
    const dir = `usr/lib/w${i >> 6}`;
    const times =
      style === 'estargz'
        ? `"modtime":"2024-01-0${1 + (i % 9)}T00:00:00Z"`
        : `"modtime":"2024-01-0${1 + (i % 9)}T00:00:00Z","accesstime":"0001-01-01T00:00:00Z","changetime":"0001-01-01T00:00:00Z"`;
    const common =
      style === 'estargz' ? `${times},"uid":0,"gid":0,"userName":"root","groupName":"root"` : times;
    if ((i & 63) === 0) {
      parts.push(`{"name":"${dir}/","type":"dir","mode":493,${common}}`);
    } else if (i % 17 === 0) {
      parts.push(`{"name":"${dir}/l${i}","type":"symlink","linkName":"f${i - 1}","mode":511,${common}}`);
    } else if (i % 29 === 0 && style === 'estargz') {
      // a file in two chunks
      parts.push(
        `{"name":"${dir}/f${i}","type":"reg","size":8388608,"mode":420,${common},"offset":${offset},` +
          `"digest":"sha256:${hex(i)}","chunkSize":4194304,"chunkDigest":"sha256:${hex(i + 1)}"}`,
        `{"name":"${dir}/f${i}","type":"chunk","offset":${offset + 4000},"chunkOffset":4194304,` +
          `"chunkSize":4194304,"chunkDigest":"sha256:${hex(i + 2)}"}`,
      );
      offset += 8000;
    } else if (i % 29 === 0) {
      // a file in three chunks, the middle one a hole
      parts.push(
        `{"type":"reg","name":"${dir}/f${i}","mode":420,"size":196608,${common},"digest":"sha256:${hex(i)}",` +
          `"offset":${offset},"endOffset":${offset + 9000},"chunkSize":65536,"chunkDigest":"sha256:${hex(i + 1)}"}`,
        `{"type":"chunk","name":"${dir}/f${i}","offset":${offset + 3000},"chunkSize":65536,"chunkOffset":65536,` +
          `"chunkDigest":"sha256:${hex(i + 2)}","chunkType":"zeros"}`,
        `{"type":"chunk","name":"${dir}/f${i}","offset":${offset + 3010},"chunkSize":65536,"chunkOffset":131072,` +
          `"chunkDigest":"sha256:${hex(i + 3)}"}`,
      );
      offset += 9000;
    } else if (style === 'estargz') {
      parts.push(
        `{"name":"${dir}/f${i}","type":"reg","size":${100 + i},"mode":420,${common},"offset":${offset},` +
          `"digest":"sha256:${hex(i)}","chunkDigest":"sha256:${hex(i)}"}`,
      );
      offset += 1000;
    } else {
      parts.push(
        `{"type":"reg","name":"${dir}/f${i}","mode":420,"size":${100 + i},${common},"digest":"sha256:${hex(i)}",` +
          `"offset":${offset},"endOffset":${offset + 900}}`,
      );
      offset += 1000;
    }
  }
  const json = Buffer.from(`{"version":1,"entries":[${parts.join(',')}]}`);
  if (style === 'cstorage') {
    const compressed = zstdCompressSync(json);
    await decompressManifestInto({ compressed, uncompressedLength: json.length }, sink, undefined);
  } else {
    for (let at = 0; at < json.length; at += WINDOW) await sink.push(json.subarray(at, at + WINDOW));
  }
  await sink.end();
}

/**
 * eStargz: inflate exactly one gzip member (CRC32 and ISIZE checked, decompressed size capped),
 * find the `stargz.index.json` tar entry in the first bytes and stream its body into `sink`.
 */
async function inflateTocMember(member: Buffer, sink: JsonSink, opts: ReadTocOptions): Promise<void> {
  const context = { what: 'toc' };
  const header = parseGzipHeader(member, 'E_BAD_TOC', context);
  const maxOutput = opts.maxTocBytes + TAR_OVERHEAD;
  const inflater = createInflateRaw({ chunkSize: WINDOW });
  let total = 0;
  let crc = 0;
  let head: Buffer | undefined = Buffer.alloc(0);
  let body: { start: number; end: number } | undefined;
  inflater.end(member.subarray(header.length));
  try {
    for await (const piece of inflater as AsyncIterable<Buffer>) {
      const at = total;
      total += piece.length;
      if (total > maxOutput) {
        throw new StoreError('E_TOC_TOO_LARGE', `decompressed data exceeds the limit of ${maxOutput} bytes`, {
          ...context,
          limit: maxOutput,
        });
      }
      crc = crc32(piece, crc);
      if (body === undefined) {
        head = Buffer.concat([head!, piece]);
        const found = findTarEntry(head);
        if (found === undefined) {
          if (head.length >= HEAD_BYTES) throw new StoreError('E_BAD_TOC', 'TOC tar headers are too long');
          continue;
        }
        checkTocEntry(found.name, found.size, opts.maxTocBytes);
        body = { start: found.start, end: found.start + found.size };
        const json = head.subarray(body.start, Math.min(head.length, body.end));
        head = undefined;
        if (json.length > 0) await sink.push(json);
        continue;
      }
      // the part of this piece inside [body.start, body.end)
      const from = Math.max(body.start - at, 0);
      const to = Math.min(body.end - at, piece.length);
      if (to > from) await sink.push(piece.subarray(from, to));
    }
  } catch (err) {
    inflater.destroy();
    if (err instanceof StoreError) throw err;
    if (opts.signal?.aborted) throw new StoreError('E_ABORTED', 'aborted while reading the TOC');
    throw new StoreError('E_BAD_TOC', `cannot inflate gzip data: ${(err as Error).message}`, context);
  }
  if (body === undefined) {
    throw new StoreError(
      'E_BAD_TOC',
      head!.length === 0 ? 'TOC tar stream has no entry' : 'TOC tar stream is truncated',
    );
  }
  if (body.end > total) throw new StoreError('E_BAD_TOC', 'TOC tar entry body is truncated');
  const trailerAt = header.length + inflater.bytesWritten;
  if (trailerAt + 8 > member.length) {
    throw new StoreError('E_BAD_TOC', 'gzip member is truncated (no trailer)', context);
  }
  if (crc !== member.readUInt32LE(trailerAt) || total % 2 ** 32 !== member.readUInt32LE(trailerAt + 4)) {
    throw new StoreError('E_BAD_TOC', 'gzip member trailer (CRC32/ISIZE) does not match its data', context);
  }
}

/**
 * zstd:chunked: decompress the manifest in windows into `sink`; it must decode to exactly the
 * announced length (never more is produced than that, whatever the frame headers claim).
 */
async function decompressManifestInto(
  manifest: { compressed: Buffer; uncompressedLength: number },
  sink: JsonSink,
  signal: AbortSignal | undefined,
): Promise<void> {
  const { compressed, uncompressedLength } = manifest;
  const dctx = new zstdBinding.DCtx();
  const window = Buffer.allocUnsafe(WINDOW);
  let inPos = 0;
  let total = 0;
  let lastRet = -1;
  for (;;) {
    if (signal?.aborted) throw new StoreError('E_ABORTED', 'aborted while decompressing the manifest');
    let ret: number;
    let produced: number;
    let consumed: number;
    try {
      [ret, produced, consumed] = dctx.decompressStream(
        window,
        compressed.subarray(inPos, Math.min(compressed.length, inPos + ZSTD_STEP)),
      );
    } catch (err) {
      throw new StoreError('E_BAD_TOC', `cannot decompress zstd:chunked manifest: ${(err as Error).message}`);
    }
    inPos += consumed;
    if (produced > 0 || consumed > 0) lastRet = ret;
    total += produced;
    if (total > uncompressedLength) {
      throw new StoreError(
        'E_BAD_TOC',
        `manifest decompresses to more than the ${uncompressedLength} bytes announced`,
      );
    }
    // the scanner copies what it keeps, so the window can be reused
    if (produced > 0) await sink.push(window.subarray(0, produced));
    if (inPos >= compressed.length && produced < window.length) break;
    if (produced === 0 && consumed === 0) throw new StoreError('E_BAD_TOC', 'manifest decompression stalled');
  }
  if (lastRet !== 0) throw new StoreError('E_BAD_TOC', 'zstd:chunked manifest ends in the middle of a frame');
  if (total !== uncompressedLength) {
    throw new StoreError(
      'E_BAD_TOC',
      `manifest decompresses to ${total} bytes, footer says ${uncompressedLength}`,
    );
  }
}
