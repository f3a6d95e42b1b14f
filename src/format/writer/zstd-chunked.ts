import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { RangeReader } from '../../util/range-reader.js';
import { goJson, rfc3339Nano, type GoJsonValue } from './go-json.js';
import { layoutUnits, type EntryDraft } from './layout.js';
import type { SourceItem } from './order.js';
import { mapOrdered, type BlobSink } from './sink.js';
import { paxRecord, statMode, xattrsOf } from './tar-header.js';
import { parsePaxTime } from './tar-reader.js';
import { TarSplitBuilder } from './tar-split.js';

const require = createRequire(import.meta.url);
const zstdNapi = require('zstd-napi') as {
  Compressor: new () => {
    setParameters(p: { compressionLevel?: number; contentSizeFlag?: boolean; checksumFlag?: boolean }): void;
    compress(b: Uint8Array): Buffer;
  };
};

export const ZSTD_MEDIA_TYPE = 'application/vnd.oci.image.layer.v1.tar+zstd';
export const MANIFEST_CHECKSUM_ANNOTATION = 'io.github.containers.zstd-chunked.manifest-checksum';
export const MANIFEST_POSITION_ANNOTATION = 'io.github.containers.zstd-chunked.manifest-position';
export const TARSPLIT_POSITION_ANNOTATION = 'io.github.containers.zstd-chunked.tarsplit-position';
/** Footer magic of the current containers/storage format ("GNUlInUx"). */
export const ZSTD_CHUNKED_MAGIC = Buffer.from('GNUlInUx', 'latin1');
const SKIPPABLE_MAGIC = 0x184d2a50;

export function zstdCompressor(level: number): (b: Buffer) => Buffer {
  const c = new zstdNapi.Compressor();
  c.setParameters({ compressionLevel: level, contentSizeFlag: true });
  return (b) => c.compress(b);
}

export function skippableFrame(payload: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32LE(SKIPPABLE_MAGIC, 0);
  head.writeUInt32LE(payload.length, 4);
  return Buffer.concat([head, payload]);
}

export interface ZstdFooter {
  manifestOffset: number;
  manifestLength: number;
  manifestUncompressed: number;
  tarSplitOffset: number;
  tarSplitLength: number;
  tarSplitUncompressed: number;
}

/** The 72-byte footer frame: skippable header + 64-byte payload (spec §2.2). */
export function zstdChunkedFooter(f: ZstdFooter): Buffer {
  const p = Buffer.alloc(64);
  p.writeBigUInt64LE(BigInt(f.manifestOffset), 0);
  p.writeBigUInt64LE(BigInt(f.manifestLength), 8);
  p.writeBigUInt64LE(BigInt(f.manifestUncompressed), 16);
  p.writeBigUInt64LE(1n, 24);
  p.writeBigUInt64LE(BigInt(f.tarSplitOffset), 32);
  p.writeBigUInt64LE(BigInt(f.tarSplitLength), 40);
  p.writeBigUInt64LE(BigInt(f.tarSplitUncompressed), 48);
  ZSTD_CHUNKED_MAGIC.copy(p, 56);
  return skippableFrame(p);
}

function paxTimeJson(raw: Buffer | undefined): string | undefined {
  if (raw === undefined) return undefined;
  try {
    const t = parsePaxTime(raw.toString('latin1'));
    return rfc3339Nano(t.sec, t.nsec);
  } catch {
    return undefined; // an unparsable atime/ctime is informational only
  }
}

/**
 * containers/storage manifest entries (pkg/chunked/internal/minimal FileMetadata field order):
 * a file with several chunks is a `reg` entry carrying chunk 0 followed by `chunk` entries; a
 * single-chunk file has no chunk fields (its `digest` covers it) unless that chunk is all zeros.
 * `mode` carries the S_IFMT type bits like c/storage; `endOffset` of the `reg` entry is the end of
 * the file's last frame, that of a `chunk` entry the end of its own frame.
 */
export function zstdTocEntries(drafts: EntryDraft[]): GoJsonValue[] {
  const nz = (n: number): number | undefined => (n === 0 ? undefined : n);
  const out: GoJsonValue[] = [];
  for (const d of drafts) {
    const h = d.header;
    const xmap = new Map<string, GoJsonValue>();
    for (const [k, v] of xattrsOf(h)) xmap.set(k, v.toString('base64'));
    const chunks = d.chunks;
    const first = chunks[0];
    const last = chunks[chunks.length - 1];
    const chunked = chunks.length > 1 || (first?.zeros ?? false);
    out.push({
      type: d.type,
      name: h.name,
      linkName: h.linkname === '' ? undefined : h.linkname,
      mode: nz(statMode(h)),
      size: d.type === 'reg' ? nz(h.size) : undefined,
      uid: nz(h.uid),
      gid: nz(h.gid),
      userName: h.uname === '' ? undefined : h.uname,
      groupName: h.gname === '' ? undefined : h.gname,
      modtime: rfc3339Nano(h.mtime, h.mtimeNsec),
      accesstime: paxTimeJson(paxRecord(h, 'atime')),
      changetime: paxTimeJson(paxRecord(h, 'ctime')),
      devMajor: nz(h.devmajor),
      devMinor: nz(h.devminor),
      xattrs: xmap.size > 0 ? xmap : undefined,
      digest: first ? d.digest : undefined,
      offset: first?.offset,
      endOffset: last?.end,
      chunkSize: chunked ? first!.size : undefined,
      chunkDigest: chunked ? first!.digest : undefined,
      chunkType: chunked && first!.zeros ? 'zeros' : undefined,
    });
    for (const c of chunks.slice(1)) {
      out.push({
        type: 'chunk',
        name: h.name,
        offset: c.offset,
        endOffset: c.end,
        chunkSize: c.size,
        chunkOffset: c.chunkOffset,
        chunkDigest: c.digest,
        chunkType: c.zeros ? 'zeros' : undefined,
      });
    }
  }
  return out;
}

export interface ZstdBuilt extends ZstdFooter {
  manifestChecksum: string;
  tocJsonDigest: string;
  diffID: string;
  uncompressedSize: number;
}

export async function writeZstdChunked(
  items: SourceItem[],
  payload: RangeReader,
  sink: BlobSink,
  opts: { chunkSize: number; zstdLevel: number },
): Promise<ZstdBuilt> {
  const compress = zstdCompressor(opts.zstdLevel);
  const drafts: EntryDraft[] = [];
  const tarSplit = new TarSplitBuilder();
  const diff = createHash('sha256');
  let uncompressed = 0;
  const units = layoutUnits(items, payload, { style: 'zstd', chunkSize: opts.chunkSize, tarSplit }, drafts);
  // zstd-napi compresses synchronously, so there is nothing to overlap: concurrency 1.
  for await (const [unit, frame] of mapOrdered(
    units,
    async (u) => compress(u.parts.length === 1 ? u.parts[0]! : Buffer.concat(u.parts)),
    1,
  )) {
    if (unit.chunk) unit.chunk.offset = sink.offset;
    for (const p of unit.parts) diff.update(p);
    uncompressed += unit.length;
    await sink.write(frame);
    if (unit.chunk) unit.chunk.end = sink.offset;
  }

  const tarSplitData = tarSplit.finish();
  const tarSplitCompressed = compress(tarSplitData);
  const json = Buffer.from(
    goJson({
      version: 1,
      entries: zstdTocEntries(drafts),
      tarSplitDigest: 'sha256:' + createHash('sha256').update(tarSplitCompressed).digest('hex'),
    }),
    'utf8',
  );
  const manifest = compress(json);
  const manifestOffset = sink.offset + 8;
  await sink.write(skippableFrame(manifest));
  const tarSplitOffset = sink.offset + 8;
  await sink.write(skippableFrame(tarSplitCompressed));
  const footer: ZstdFooter = {
    manifestOffset,
    manifestLength: manifest.length,
    manifestUncompressed: json.length,
    tarSplitOffset,
    tarSplitLength: tarSplitCompressed.length,
    tarSplitUncompressed: tarSplitData.length,
  };
  await sink.write(zstdChunkedFooter(footer));
  return {
    ...footer,
    manifestChecksum: 'sha256:' + createHash('sha256').update(manifest).digest('hex'),
    tocJsonDigest: 'sha256:' + createHash('sha256').update(json).digest('hex'),
    diffID: 'sha256:' + diff.digest('hex'),
    uncompressedSize: uncompressed,
  };
}
