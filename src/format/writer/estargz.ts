import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import type { RangeReader } from '../../util/range-reader.js';
import { goJson, rfc3339, type GoJsonValue } from './go-json.js';
import { layoutUnits, type EntryDraft } from './layout.js';
import type { SourceItem } from './order.js';
import { TOC_TAR_NAME } from './order.js';
import { mapOrdered, type BlobSink } from './sink.js';
import { encodeHeader, padding, simpleFileHeader, xattrsOf } from './tar-header.js';

const gzipAsync = promisify(gzip);

export const ESTARGZ_MEDIA_TYPE = 'application/vnd.oci.image.layer.v1.tar+gzip';
export const TOC_DIGEST_ANNOTATION = 'containerd.io/snapshot/stargz/toc.digest';
export const UNCOMPRESSED_SIZE_ANNOTATION = 'io.containers.estargz.uncompressed-size';

/** One gzip member, header normalised like Go compress/gzip (MTIME 0, OS 0xff). */
export async function gzipMember(data: Buffer, level: number): Promise<Buffer> {
  const out = await gzipAsync(data, { level });
  out[9] = 0xff;
  return out;
}

/** The 51-byte eStargz footer for `tocOffset` (spec §1.6). */
export function estargzFooter(tocOffset: number): Buffer {
  const b = Buffer.alloc(51);
  Buffer.from([0x1f, 0x8b, 0x08, 0x04, 0, 0, 0, 0, 0, 0xff, 26, 0, 0x53, 0x47, 22, 0]).copy(b, 0);
  b.write(tocOffset.toString(16).padStart(16, '0') + 'STARGZ', 16, 'latin1');
  Buffer.from([0x01, 0x00, 0x00, 0xff, 0xff]).copy(b, 38);
  return b;
}

/** TOC entries in estargz field order and omitempty rules (spec §1.4). */
export function estargzTocEntries(drafts: EntryDraft[], chunkSize: number): GoJsonValue[] {
  const lastUser = new Map<number, string>();
  const lastGroup = new Map<number, string>();
  const ifChanged = (mp: Map<number, string>, id: number, name: string): string | undefined => {
    if (name === '' || mp.get(id) === name) return undefined;
    mp.set(id, name);
    return name;
  };
  const nz = (n: number): number | undefined => (n === 0 ? undefined : n);
  const out: GoJsonValue[] = [];
  for (const d of drafts) {
    const h = d.header;
    const mtime = h.mtime + (h.mtimeNsec >= 500_000_000 ? 1 : 0);
    const xattrs = xattrsOf(h);
    const first = d.chunks[0];
    const xmap = new Map<string, GoJsonValue>();
    for (const [k, v] of xattrs) xmap.set(k, v.toString('base64'));
    out.push({
      name: h.name,
      type: d.type,
      size: d.type === 'reg' ? nz(h.size) : undefined,
      modtime: h.mtime === 0 ? undefined : rfc3339(mtime),
      linkName: h.linkname === '' ? undefined : h.linkname,
      mode: nz(h.mode),
      uid: nz(h.uid),
      gid: nz(h.gid),
      userName: ifChanged(lastUser, h.uid, h.uname),
      groupName: ifChanged(lastGroup, h.gid, h.gname),
      offset: first?.offset,
      devMajor: nz(h.devmajor),
      devMinor: nz(h.devminor),
      xattrs: xmap.size > 0 ? xmap : undefined,
      digest: d.digest,
      chunkSize: first && first.size === chunkSize ? first.size : undefined,
      chunkDigest: first?.digest,
    });
    for (const c of d.chunks.slice(1)) {
      out.push({
        name: h.name,
        type: 'chunk',
        offset: c.offset,
        chunkOffset: c.chunkOffset,
        chunkSize: c.size === chunkSize ? c.size : undefined,
        chunkDigest: c.digest,
      });
    }
  }
  return out;
}

export interface EstargzBuilt {
  tocDigest: string;
  tocOffset: number;
  diffID: string;
  uncompressedSize: number;
}

export async function writeEstargz(
  items: SourceItem[],
  payload: RangeReader,
  sink: BlobSink,
  opts: { chunkSize: number; gzipLevel: number; concurrency: number },
): Promise<EstargzBuilt> {
  const drafts: EntryDraft[] = [];
  const diff = createHash('sha256');
  let uncompressed = 0;
  const units = layoutUnits(items, payload, { style: 'estargz', chunkSize: opts.chunkSize }, drafts);
  for await (const [unit, member] of mapOrdered(
    units,
    (u) => gzipMember(u.parts.length === 1 ? u.parts[0]! : Buffer.concat(u.parts), opts.gzipLevel),
    opts.concurrency,
  )) {
    if (unit.chunk) unit.chunk.offset = sink.offset;
    for (const p of unit.parts) diff.update(p);
    uncompressed += unit.length;
    await sink.write(member);
    if (unit.chunk) unit.chunk.end = sink.offset;
  }

  const tocOffset = sink.offset;
  const json = Buffer.from(
    goJson({ version: 1, entries: estargzTocEntries(drafts, opts.chunkSize) }, '\t'),
    'utf8',
  );
  const tocTar = Buffer.concat([
    encodeHeader(simpleFileHeader(TOC_TAR_NAME, json.length)),
    json,
    Buffer.alloc(padding(json.length) + 1024),
  ]);
  diff.update(tocTar);
  uncompressed += tocTar.length;
  await sink.write(await gzipMember(tocTar, opts.gzipLevel));
  await sink.write(estargzFooter(tocOffset));
  return {
    tocDigest: 'sha256:' + createHash('sha256').update(json).digest('hex'),
    tocOffset,
    diffID: 'sha256:' + diff.digest('hex'),
    uncompressedSize: uncompressed,
  };
}
