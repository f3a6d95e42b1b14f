import { describe, expect, it } from 'vitest';
import { formatStatusTable, type LayerStatusRow } from '../../src/cli/status-command.js';

const PLAIN_REASON = 'layer has no TOC digest annotation (plain gzip/zstd layer)';

function columnsStarts(line: string): number[] {
  const starts: number[] = [0];
  for (const m of line.matchAll(/ {2,}(?=\S)/g)) starts.push(m.index + m[0].length);
  return starts;
}

describe('status table', () => {
  const layers: LayerStatusRow[] = [
    {
      ref: 'registry.example:5000/some/very/long/repository/name/for/the/image:with-a-long-tag',
      digest: 'sha256:' + 'a'.repeat(64),
      format: 'zstd:chunked',
      lazy: true,
      bytesFetched: 123456789,
      totalBytes: 987654321,
      percent: 12.5,
      verified: false,
      refs: 2,
      lastError: 'E_REGISTRY_NETWORK: connect ECONNREFUSED 127.0.0.1:5000 while fetching a range of the blob',
    },
    {
      ref: '127.0.0.1:5000/plain:v1',
      digest: 'sha256:' + 'b'.repeat(64),
      lazy: false,
      reason: PLAIN_REASON,
      lastError: PLAIN_REASON,
      bytesFetched: 0,
      percent: 0,
      verified: false,
      refs: 0,
    },
  ];

  it('a plain gzip layer is "not lazy (no TOC): pulled normally", not a last error', () => {
    const lines = formatStatusTable({ layers }).trimEnd().split('\n');
    const plain = lines.find((l) => l.startsWith('127.0.0.1:5000/plain:v1'))!;
    expect(plain).toContain('not lazy (no TOC): pulled normally');
    expect(plain).not.toContain(PLAIN_REASON);
    expect(plain.trimEnd().endsWith('-')).toBe(true); // LAST ERROR column
  });

  it('a real failure stays in LAST ERROR', () => {
    const failed: LayerStatusRow = {
      ...layers[1]!,
      reason: 'registry unreachable',
      lastError: 'registry unreachable',
    };
    const text = formatStatusTable({ layers: [failed] });
    expect(text).toContain('no (registry unreachable)');
    expect(text.trimEnd().endsWith('registry unreachable')).toBe(true);
  });

  it('columns never run into each other, with or without truncation', () => {
    for (const trunc of [true, false]) {
      const lines = formatStatusTable({ layers }, { trunc }).trimEnd().split('\n');
      const header = columnsStarts(lines[0]!);
      expect(header).toHaveLength(9);
      for (const row of lines.slice(1)) {
        // every cell starts where its header starts, separated by at least two spaces
        for (const start of header.slice(1)) {
          expect(row.slice(start - 2, start), `${row}\n${lines[0]}`).toBe('  ');
          expect(row[start]).not.toBe(' ');
        }
      }
    }
  });
});
