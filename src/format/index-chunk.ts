/**
 * The chunks a parsed TOC keeps in memory. A TOC of 500,000 small files has ~425,000 of them,
 * so their layout is what a huge TOC costs: the digest is held as its 32 raw bytes (a 32-char
 * one-byte string, 48 B on the heap, where `sha256:<hex>` takes 88) and spelled out on access.
 */
import type { Chunk } from './model.js';

const SHA256_PREFIX = 'sha256:';
const PACKED_LENGTH = 32;
const HEX_LENGTH = SHA256_PREFIX.length + 2 * PACKED_LENGTH;
/** Lowercase hex digit code -> value, -1 for anything else (uppercase is not canonical). */
const NIBBLE = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i++) NIBBLE['0123456789abcdef'.charCodeAt(i)] = i;
const b = new Uint16Array(PACKED_LENGTH);

/**
 * `sha256:<64 lowercase hex>` -> its 32 bytes as a latin1 string; anything else unchanged.
 * A hand loop and String.fromCharCode with 32 arguments (~0.25 us): a regular expression and a
 * Buffer round trip took ~2.5 us per chunk (a third of a 500,000-entry TOC's open), and
 * fromCharCode.apply over a typed array ~0.6 us.
 */
export function packDigest(digest: string): string {
  // The TOC parser checks each entry's digests with isSha256 (below) right before the tree
  // packs the same strings: the last two results are remembered, so each digest is scanned once.
  if (digest === memoIn[0]) return memoOut[0]!;
  if (digest === memoIn[1]) return memoOut[1]!;
  const out = pack(digest);
  memoIn[1] = memoIn[0];
  memoOut[1] = memoOut[0];
  memoIn[0] = digest;
  memoOut[0] = out;
  return out;
}

const memoIn: [string, string] = ['', ''];
const memoOut: [string, string] = ['', ''];

function pack(digest: string): string {
  if (digest.length !== HEX_LENGTH || !digest.startsWith(SHA256_PREFIX)) return digest;
  for (let i = 0, at = SHA256_PREFIX.length; i < PACKED_LENGTH; i++, at += 2) {
    const hi = digest.charCodeAt(at);
    const lo = digest.charCodeAt(at + 1);
    const h = hi < 128 ? NIBBLE[hi]! : -1;
    const l = lo < 128 ? NIBBLE[lo]! : -1;
    if ((h | l) < 0) return digest;
    b[i] = (h << 4) | l;
  }
  // prettier-ignore
  return String.fromCharCode(
    b[0]!, b[1]!, b[2]!, b[3]!, b[4]!, b[5]!, b[6]!, b[7]!, b[8]!, b[9]!, b[10]!, b[11]!, b[12]!, b[13]!, b[14]!, b[15]!,
    b[16]!, b[17]!, b[18]!, b[19]!, b[20]!, b[21]!, b[22]!, b[23]!, b[24]!, b[25]!, b[26]!, b[27]!, b[28]!, b[29]!, b[30]!, b[31]!,
  );
}

/**
 * Is `digest` exactly `sha256:<64 lowercase hex>`? (What packDigest packs: a packed digest is a
 * new 32-character string, anything else comes back as it was.) Costs no more than the packing
 * the tree does next, which it then finds remembered; a regular expression took as long again.
 */
export function isSha256(digest: string): boolean {
  return packDigest(digest) !== digest;
}

/** Inverse of packDigest. A digest that was not packed is longer than 32 characters. */
export function unpackDigest(packed: string): string {
  if (packed.length !== PACKED_LENGTH) return packed;
  return SHA256_PREFIX + Buffer.from(packed, 'latin1').toString('hex');
}

/**
 * Offsets beyond the small-integer range are stored as boxed numbers (16 B each); a field that
 * once held a double is boxed for every object of its shape. Values read from a Float64Array are
 * doubles even when integral, so they are turned back into integers where they fit.
 */
export function compactInteger(n: number): number {
  return n >= 0 && n <= 0x3fffffff ? n | 0 : n;
}

export class IndexChunk implements Chunk {
  fileOffset: number;
  size: number;
  compressedOffset: number;
  compressedEnd: number;
  innerOffset: number;
  private packed: string;

  /** `packed`: the digest as packDigest() gives it. Checked chunks come from create(). */
  constructor(
    fileOffset: number,
    size: number,
    compressedOffset: number,
    compressedEnd: number,
    innerOffset: number,
    packed: string,
  ) {
    this.fileOffset = compactInteger(fileOffset);
    this.size = compactInteger(size);
    this.compressedOffset = compactInteger(compressedOffset);
    this.compressedEnd = compactInteger(compressedEnd);
    this.innerOffset = compactInteger(innerOffset);
    this.packed = packed;
  }

  /** Positional: the tree builds one per chunk of the TOC, and an options object each would be garbage. */
  static create(
    fileOffset: number,
    size: number,
    compressedOffset: number,
    compressedEnd: number,
    innerOffset: number,
    digest: string,
    zeros: boolean,
  ): IndexChunk {
    if (zeros !== (compressedEnd === compressedOffset)) {
      throw new RangeError('a chunk has an empty compressed span exactly when it is a zeros chunk');
    }
    return new IndexChunk(fileOffset, size, compressedOffset, compressedEnd, innerOffset, packDigest(digest));
  }

  static from(c: Chunk): IndexChunk {
    const { fileOffset, size, compressedOffset, compressedEnd, innerOffset, digest } = c;
    return IndexChunk.create(
      fileOffset,
      size,
      compressedOffset,
      compressedEnd,
      innerOffset,
      digest,
      c.zeros === true,
    );
  }

  /**
   * Told by the span, not stored: the tree gives a zeros chunk an empty compressed span and
   * refuses an empty span for any other chunk (toc-chunks.ts checkSpan).
   */
  get zeros(): true | undefined {
    return this.compressedEnd === this.compressedOffset ? true : undefined;
  }

  get digest(): string {
    return unpackDigest(this.packed);
  }

  /** See digestKey(). */
  get packedDigest(): string {
    return this.packed;
  }

  set digest(digest: string) {
    this.packed = packDigest(digest);
  }
}

/**
 * A chunk's digest as a key for sets and maps over a layer's chunks: the packed form, which an
 * IndexChunk already holds (spelling 425,000 digests out would cost ~88 B each).
 */
export function digestKey(c: Chunk): string {
  return c instanceof IndexChunk ? c.packedDigest : packDigest(c.digest);
}
