/**
 * ReadAround.extra: the whole chunks that ride along in an on-demand span's request. The asked
 * chunk's file block (FILE_BLOCK_BYTES of the file, aligned, both directions) comes along at once,
 * as one eStargz chunk would (a finely chunked file read through page faults); other files only
 * within the current window after the asked span.
 */
import { describe, expect, it } from 'vitest';
import type { Chunk } from '../../src/format/model.js';
import { FILE_BLOCK_BYTES, READ_AROUND_BYTES, ReadAround } from '../../src/layer/read-around.js';

const KB = 1000;
let n = 0;
function chunk(compressedOffset: number, compressedSize: number, fileOffset: number, size: number): Chunk {
  n++;
  return {
    fileOffset,
    size,
    compressedOffset,
    compressedEnd: compressedOffset + compressedSize,
    innerOffset: 0,
    digest: 'sha256:' + n.toString(16).padStart(64, '0'),
  };
}

/** Files laid out back to back: `chunks[i]` compressed chunks of 50 kB (60 kB uncompressed) each. */
function layout(chunksPerFile: number[]): Chunk[] {
  const out: Chunk[] = [];
  let at = 0;
  for (const count of chunksPerFile) {
    for (let i = 0; i < count; i++) {
      out.push(chunk(at, 50 * KB, i * 60 * KB, 60 * KB));
      at += 50 * KB;
    }
  }
  return out;
}

function readAround(all: Chunk[], isFresh: (c: Chunk) => boolean = () => true): ReadAround {
  return new ReadAround({
    blobSize: all[all.length - 1]!.compressedEnd,
    maxGap: 0,
    baseBytes: READ_AROUND_BYTES,
    neighbours: () => all,
    isFresh,
  });
}

const bytes = (spans: Array<{ offset: number; end: number }>) =>
  spans.reduce((a, s) => a + s.end - s.offset, 0);

describe('ReadAround', () => {
  it("takes the asked chunk's file block along: the chunks whose file offsets share its 4 MiB block", () => {
    // one file of 100 chunks (60 kB each, 6 MB), then another file
    const all = layout([100, 5]);
    const file = all.slice(0, 100);
    const asked = (c: Chunk) => ({ offset: c.compressedOffset, end: c.compressedEnd, chunk: c, file });
    const inBlock = Math.ceil(FILE_BLOCK_BYTES / (60 * KB)); // chunks starting in the first block
    const first = all[0]!;
    expect(readAround(all).extra([asked(first)])).toEqual([
      { offset: first.compressedEnd, end: all[inBlock - 1]!.compressedEnd },
    ]);
    // a chunk in the middle of the second block brings the block's chunks on both sides
    const mid = all[80]!;
    expect(readAround(all).extra([asked(mid)])).toEqual([
      { offset: all[inBlock]!.compressedOffset, end: mid.compressedOffset },
      { offset: mid.compressedEnd, end: all[99]!.compressedEnd },
    ]);
    // without its file, only the window after the asked span comes along
    const bare = readAround(all).extra([{ offset: first.compressedOffset, end: first.compressedEnd }]);
    expect(bytes(bare)).toBe(Math.floor(READ_AROUND_BYTES / (50 * KB)) * 50 * KB);
  });

  it('skips block chunks already cached or in flight and takes the rest', () => {
    const all = layout([20]);
    const busy = new Set([all[3]!, all[4]!]);
    const first = all[0]!;
    const extra = readAround(all, (c) => !busy.has(c)).extra([
      { offset: first.compressedOffset, end: first.compressedEnd, chunk: first, file: all },
    ]);
    expect(extra).toEqual([
      { offset: all[1]!.compressedOffset, end: all[2]!.compressedEnd },
      { offset: all[5]!.compressedOffset, end: all[19]!.compressedEnd },
    ]);
  });

  it('stops at the end of the file: other files come along only within the base window', () => {
    // a file of 3 chunks, then single-chunk files
    const all = layout([3, 1, 1, 1, 1, 1, 1, 1]);
    const first = all[0]!;
    const extra = readAround(all).extra([
      { offset: first.compressedOffset, end: first.compressedEnd, chunk: first, file: all.slice(0, 3) },
    ]);
    // 2 more chunks of the file (100 kB), then other files up to 128 KiB past the asked span: none
    // of them fits whole after the file's own 100 kB
    const end = extra[extra.length - 1]!.end;
    expect(bytes(extra)).toBe(100 * KB + Math.floor((READ_AROUND_BYTES - 100 * KB) / (50 * KB)) * 50 * KB);
    expect(end).toBeLessThanOrEqual(first.compressedEnd + READ_AROUND_BYTES);
  });

  it('single-chunk files: only the base window (as before)', () => {
    const all = layout(Array.from({ length: 30 }, () => 1));
    const first = all[0]!;
    const extra = readAround(all).extra([{ offset: first.compressedOffset, end: first.compressedEnd }]);
    expect(bytes(extra)).toBe(Math.floor(READ_AROUND_BYTES / (50 * KB)) * 50 * KB);
  });
});
