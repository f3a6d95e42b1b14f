/**
 * ReadAround.extra: the whole chunks after an on-demand span that ride along in its request. The
 * rest of the asked chunk's own file comes along up to the largest window at once (a finely
 * chunked file read through page faults); other files only within the current window.
 */
import { describe, expect, it } from 'vitest';
import type { Chunk } from '../../src/format/model.js';
import { MAX_READ_AROUND_BYTES, READ_AROUND_BYTES, ReadAround } from '../../src/layer/read-around.js';

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

function readAround(all: Chunk[]): ReadAround {
  return new ReadAround({
    blobSize: all[all.length - 1]!.compressedEnd,
    maxGap: 0,
    baseBytes: READ_AROUND_BYTES,
    neighbours: () => all,
    isFresh: () => true,
  });
}

const bytes = (spans: Array<{ offset: number; end: number }>) =>
  spans.reduce((a, s) => a + s.end - s.offset, 0);

describe('ReadAround', () => {
  it("takes the rest of the asked chunk's file along, up to the largest window", () => {
    // one file of 40 chunks (2 MB compressed), then another file
    const all = layout([40, 5]);
    const first = all[0]!;
    const extra = readAround(all).extra([{ offset: first.compressedOffset, end: first.compressedEnd }]);
    // whole chunks of the same file up to MAX_READ_AROUND_BYTES past the asked span
    const whole = Math.floor(MAX_READ_AROUND_BYTES / (50 * KB));
    expect(bytes(extra)).toBe(whole * 50 * KB);
    expect(extra[extra.length - 1]!.end).toBeLessThanOrEqual(first.compressedEnd + MAX_READ_AROUND_BYTES);
  });

  it('stops at the end of the file: other files come along only within the base window', () => {
    // a file of 3 chunks, then single-chunk files
    const all = layout([3, 1, 1, 1, 1, 1, 1, 1]);
    const first = all[0]!;
    const extra = readAround(all).extra([{ offset: first.compressedOffset, end: first.compressedEnd }]);
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
