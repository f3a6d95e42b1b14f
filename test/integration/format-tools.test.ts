/**
 * The ground-truth vectors, decompressed and listed by the system's gzip, zstd and tar (tools
 * independent of every library the store uses). Missing tools fail loudly.
 */
import { describe, expect, test } from 'vitest';
import { run, sha256, VECTOR_A, VECTOR_B } from '../helpers/format-fixtures.js';

const A_DIFF_ID = 'sha256:dc11a1a3d8c5e4383aaceb34775ac63839d98fd3550da153a7d8cf8035471618';
const B_DIFF_ID = 'sha256:ee484253ce22b6ece91f77f3bd461abcd602337ea94aa6ba684270b5cb455524';

describe('vectors through the system tools', () => {
  test('vector A: gzip -dc yields the DiffID; tar -t lists the TOC and the landmark', async () => {
    const plain = await run('gzip', ['-dc', VECTOR_A]);
    expect(sha256(plain)).toBe(A_DIFF_ID);
    const names = (await run('tar', ['-t'], { stdin: plain })).toString().split('\n');
    expect(names).toContain('stargz.index.json');
    expect(names).toContain('.prefetch.landmark');
  });

  test('vector B: zstd -dc yields the DiffID', async () => {
    const plain = await run('zstd', ['-dc', VECTOR_B]);
    expect(plain.length).toBe(6656);
    expect(sha256(plain)).toBe(B_DIFF_ID);
  });
});
