/**
 * Tiny, independent blob builders for format tests: a minimal USTAR header writer, eStargz
 * blobs with an arbitrary TOC (zlib), and zstd:chunked blobs (zstd-napi frames) in the
 * current containers/storage layout (64-byte GNUlInUx footer). Built from the specs, not from
 * src/, so the readers are checked against something they did not produce.
 */
import { gzipSync } from 'node:zlib';
import { compress as zstdCompress } from 'zstd-napi';

export interface UstarFields {
  name: string;
  size?: number;
  mode?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  /** '0' reg, '1' hardlink, '2' symlink, '5' dir */
  type?: string;
  linkname?: string;
}

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, '0') + '\0';
}

/** One 512-byte USTAR header with a correct checksum. */
export function ustarHeader(f: UstarFields): Buffer {
  const h = Buffer.alloc(512);
  h.write(f.name, 0, 100, 'utf8');
  h.write(octal(f.mode ?? 0o644, 8), 100, 'latin1');
  h.write(octal(f.uid ?? 0, 8), 108, 'latin1');
  h.write(octal(f.gid ?? 0, 8), 116, 'latin1');
  h.write(octal(f.size ?? 0, 12), 124, 'latin1');
  h.write(octal(f.mtime ?? 0, 12), 136, 'latin1');
  h.write('        ', 148, 'latin1');
  h.write(f.type ?? '0', 156, 'latin1');
  h.write(f.linkname ?? '', 157, 100, 'utf8');
  h.write('ustar\0', 257, 'latin1');
  h.write('00', 263, 'latin1');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1');
  return h;
}

export function tarPadding(size: number): Buffer {
  return Buffer.alloc((512 - (size % 512)) % 512);
}

/** The 51-byte eStargz footer, written from the spec §1.6 table. */
export function estargzFooterBytes(tocOffset: number): Buffer {
  return Buffer.concat([
    Buffer.from('1f8b08040000000000ff', 'hex'),
    Buffer.from([26, 0, 0x53, 0x47, 22, 0]),
    Buffer.from(tocOffset.toString(16).padStart(16, '0') + 'STARGZ', 'latin1'),
    Buffer.from('010000ffff', 'hex'),
    Buffer.alloc(8),
  ]);
}

/** The TOC member: gzip(tar header `stargz.index.json` + JSON + padding + two zero blocks). */
export function tocMember(json: Buffer | string, name = 'stargz.index.json'): Buffer {
  const body = Buffer.from(json);
  return gzipSync(
    Buffer.concat([
      ustarHeader({ name, size: body.length, mode: 0 }),
      body,
      tarPadding(body.length),
      Buffer.alloc(1024),
    ]),
  );
}

export interface BuiltBlob {
  blob: Buffer;
  /** Compressed offset of each payload member/frame, in input order. */
  offsets: number[];
  tocOffset: number;
  json: Buffer;
}

/**
 * eStargz blob: each payload is one gzip member (in order), then the TOC member and the footer.
 * `toc` receives the member offsets and returns the TOC (object or raw JSON text).
 */
export function buildEStargz(payloads: Buffer[], toc: (offsets: number[]) => unknown): BuiltBlob {
  const members: Buffer[] = [];
  const offsets: number[] = [];
  let pos = 0;
  for (const p of payloads) {
    const m = gzipSync(p);
    offsets.push(pos);
    members.push(m);
    pos += m.length;
  }
  const t = toc(offsets);
  const json = Buffer.from(typeof t === 'string' ? t : JSON.stringify(t, null, '\t'));
  const member = tocMember(json);
  return {
    blob: Buffer.concat([...members, member, estargzFooterBytes(pos)]),
    offsets,
    tocOffset: pos,
    json,
  };
}

export function skippableFrame(payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt32LE(0x184d2a50, 0);
  h.writeUInt32LE(payload.length, 4);
  return Buffer.concat([h, payload]);
}

/** One segment of the data stream: compressed as its own zstd frame. */
export interface Segment {
  data: Buffer;
}

export interface ZstdChunkedBlob {
  blob: Buffer;
  /** Compressed offset of each segment's frame, plus the data end as the last element. */
  offsets: number[];
  manifestOffset: number;
  compressedManifest: Buffer;
  json: Buffer;
  tarSplitOffset: number;
}

/**
 * Current containers/storage zstd:chunked blob: every segment a zstd frame, then
 * skippable(manifest), skippable(tar-split), skippable(64-byte footer, magic GNUlInUx).
 */
export function buildZstdChunked(
  segments: Buffer[],
  toc: (offsets: number[]) => unknown,
  opts: { footerType?: number; magic?: string; tarSplit?: Buffer } = {},
): ZstdChunkedBlob {
  const frames: Buffer[] = [];
  const offsets: number[] = [];
  let pos = 0;
  for (const s of segments) {
    const f = zstdCompress(s);
    offsets.push(pos);
    frames.push(f);
    pos += f.length;
  }
  offsets.push(pos);
  const t = toc(offsets);
  const json = Buffer.from(typeof t === 'string' ? t : JSON.stringify(t));
  const compressedManifest = zstdCompress(json);
  const manifestOffset = pos + 8;
  const tarSplit = opts.tarSplit ?? zstdCompress(Buffer.from('{"type":1}\n'));
  const tarSplitOffset = manifestOffset + compressedManifest.length + 8;
  const footer = Buffer.alloc(64);
  footer.writeBigUInt64LE(BigInt(manifestOffset), 0);
  footer.writeBigUInt64LE(BigInt(compressedManifest.length), 8);
  footer.writeBigUInt64LE(BigInt(json.length), 16);
  footer.writeBigUInt64LE(BigInt(opts.footerType ?? 1), 24);
  footer.writeBigUInt64LE(BigInt(tarSplitOffset), 32);
  footer.writeBigUInt64LE(BigInt(tarSplit.length), 40);
  footer.writeBigUInt64LE(BigInt(11), 48);
  footer.write(opts.magic ?? 'GNUlInUx', 56, 'latin1');
  const blob = Buffer.concat([
    ...frames,
    skippableFrame(compressedManifest),
    skippableFrame(tarSplit),
    skippableFrame(footer),
  ]);
  return { blob, offsets, manifestOffset, compressedManifest, json, tarSplitOffset };
}
