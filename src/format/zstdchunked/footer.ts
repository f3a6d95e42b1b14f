import { StoreError } from '../../util/errors.js';

/** zstd skippable frame magic (little-endian 0x184D2A50; 0x184D2A5? are all skippable). */
export const SKIPPABLE_MAGIC = Buffer.from([0x50, 0x2a, 0x4d, 0x18]);
export const SKIPPABLE_HEADER_SIZE = 8;
/** Early (2021) footer magic used by stargz tooling and Podman <= 4.x: "GnUlInUx". */
export const LEGACY_MAGIC = Buffer.from('GnUlInUx', 'latin1');
/** Current containers/storage footer magic: "GNUlInUx". */
export const CURRENT_MAGIC = Buffer.from('GNUlInUx', 'latin1');
/** 8-byte skippable header + 40-byte payload. */
export const LEGACY_FOOTER_SIZE = 48;
/** 8-byte skippable header + 64-byte payload. */
export const CURRENT_FOOTER_SIZE = 72;
/** The only manifest type in use (CRFS-compatible JSON). */
export const MANIFEST_TYPE_CRFS = 1;

export interface ZstdFooter {
  flavour: 'legacy' | 'current';
  footerSize: number;
  /** Offset of the compressed manifest (skippable frame payload). */
  manifestOffset: number;
  manifestLength: number;
  manifestUncompressedLength: number;
  /** Current flavour only. */
  tarSplit?: { offset: number; length: number; uncompressedLength: number };
}

function u64(buf: Buffer, at: number, what: string): number {
  const v = buf.readBigUInt64LE(at);
  if (v > BigInt(Number.MAX_SAFE_INTEGER))
    throw new StoreError('E_BAD_FOOTER', `zstd:chunked footer ${what} out of range`);
  return Number(v);
}

/** True if `hdr` (8 bytes) is a skippable frame header announcing `len` bytes. */
export function isSkippableHeader(hdr: Buffer, len?: number): boolean {
  return (
    hdr.length >= SKIPPABLE_HEADER_SIZE &&
    (hdr[0]! & 0xf0) === 0x50 &&
    hdr[1] === 0x2a &&
    hdr[2] === 0x4d &&
    hdr[3] === 0x18 &&
    (len === undefined || hdr.readUInt32LE(4) === len)
  );
}

/** Which zstd:chunked footer (if any) ends `tail`; does not validate the fields. */
export function detectZstdFooter(tail: Buffer): 'legacy' | 'current' | undefined {
  if (tail.length >= CURRENT_FOOTER_SIZE && tail.subarray(tail.length - 8).equals(CURRENT_MAGIC))
    return 'current';
  if (tail.length >= LEGACY_FOOTER_SIZE && tail.subarray(tail.length - 8).equals(LEGACY_MAGIC))
    return 'legacy';
  return undefined;
}

/**
 * Parse and validate the zstd:chunked footer at the end of `tail` for a blob of `blobSize`
 * bytes: skippable frame framing, manifest type 1, ranges inside the blob before the footer.
 */
export function parseZstdFooter(tail: Buffer, blobSize: number): ZstdFooter {
  const flavour = detectZstdFooter(tail);
  if (flavour === undefined) throw new StoreError('E_BAD_FOOTER', 'no zstd:chunked footer magic');
  const footerSize = flavour === 'current' ? CURRENT_FOOTER_SIZE : LEGACY_FOOTER_SIZE;
  if (blobSize < footerSize) throw new StoreError('E_BAD_FOOTER', 'blob smaller than its footer');
  const footer = tail.subarray(tail.length - footerSize);
  if (!isSkippableHeader(footer, footerSize - SKIPPABLE_HEADER_SIZE)) {
    throw new StoreError('E_BAD_FOOTER', 'zstd:chunked footer is not a skippable frame of the right size');
  }
  const p = footer.subarray(SKIPPABLE_HEADER_SIZE);
  const manifestOffset = u64(p, 0, 'manifest offset');
  const manifestLength = u64(p, 8, 'manifest length');
  const manifestUncompressedLength = u64(p, 16, 'manifest uncompressed length');
  const type = u64(p, 24, 'manifest type');
  if (type !== MANIFEST_TYPE_CRFS) throw new StoreError('E_BAD_FOOTER', `unsupported manifest type ${type}`);
  const footerStart = blobSize - footerSize;
  const inside = (off: number, len: number): boolean =>
    off >= SKIPPABLE_HEADER_SIZE && len >= 0 && off + len <= footerStart;
  if (manifestLength === 0 || manifestUncompressedLength === 0 || !inside(manifestOffset, manifestLength)) {
    throw new StoreError('E_BAD_FOOTER', 'zstd:chunked manifest range is outside the blob', {
      offset: manifestOffset,
      length: manifestLength,
    });
  }
  const result: ZstdFooter = {
    flavour,
    footerSize,
    manifestOffset,
    manifestLength,
    manifestUncompressedLength,
  };
  if (flavour === 'current') {
    const offset = u64(p, 32, 'tar-split offset');
    const length = u64(p, 40, 'tar-split length');
    const uncompressedLength = u64(p, 48, 'tar-split uncompressed length');
    if (
      !inside(offset, length) ||
      (offset < manifestOffset + manifestLength && offset + length > manifestOffset)
    ) {
      throw new StoreError('E_BAD_FOOTER', 'zstd:chunked tar-split range is invalid', { offset, length });
    }
    result.tarSplit = { offset, length, uncompressedLength };
  }
  return result;
}
