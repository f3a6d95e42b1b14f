/**
 * What a process's resident memory is made of, by kind of mapping, at its peak: the question every
 * peak-RSS figure raises (is it the JavaScript heap, Buffers, malloc's heap, or the Node binary's
 * own pages?). Read from /proc/<pid>/smaps, sampled while the store works; the sample with the
 * largest total is kept. Not a test and not the store: a bench helper.
 *
 * The classes follow how the store's memory is allocated (glibc mmap threshold 256 KiB,
 * bin/store-env): mappings of 4 MiB and more are large Buffers (compressed spans, decoded chunks);
 * 256 KiB - 4 MiB are mostly V8's heap pages (256 KiB each) and mid-sized Buffers; `[heap]` is
 * malloc's heap (socket reads, small Buffers, native objects); the Node binary's pages are
 * file-backed (the kernel can drop them under pressure, but they count in RSS).
 */
import { readFile } from 'node:fs/promises';

export type RssPart =
  'node-binary' | 'anon-4M+' | 'anon-256K-4M' | 'anon-small' | 'malloc-heap' | 'other-files' | 'other';

export type RssParts = Record<RssPart, number>;

const KiB = 1024;
const MiB = 1024 * KiB;

const empty = (): RssParts => ({
  'node-binary': 0,
  'anon-4M+': 0,
  'anon-256K-4M': 0,
  'anon-small': 0,
  'malloc-heap': 0,
  'other-files': 0,
  other: 0,
});

/** The class of one mapping (pure). `name` is the smaps header's path or pseudo-name, '' if none. */
export function classify(name: string, bytes: number): RssPart {
  if (name.startsWith('/')) {
    return /\/node( \(deleted\))?$/.test(name) ? 'node-binary' : 'other-files';
  }
  if (name === '[heap]') return 'malloc-heap';
  if (name !== '') return 'other';
  if (bytes >= 4 * MiB) return 'anon-4M+';
  if (bytes >= 256 * KiB) return 'anon-256K-4M';
  return 'anon-small';
}

const HEADER = /^([0-9a-f]+)-([0-9a-f]+)\s+\S+\s+\S+\s+\S+\s+\S+\s*(.*)$/;

/** Resident bytes per class from the text of /proc/<pid>/smaps (pure). */
export function parseSmaps(text: string): RssParts {
  const parts = empty();
  let current: RssPart = 'other';
  for (const line of text.split('\n')) {
    const h = HEADER.exec(line);
    if (h !== null) {
      const size = parseInt(h[2]!, 16) - parseInt(h[1]!, 16);
      current = classify(h[3]!.trim(), size);
      continue;
    }
    if (line.startsWith('Rss:')) {
      const kb = Number(/^Rss:\s+(\d+)\s+kB/.exec(line)?.[1] ?? 0);
      parts[current] += kb * KiB;
    }
  }
  return parts;
}

export const totalOf = (p: RssParts): number => Object.values(p).reduce((a, b) => a + b, 0);

/** `node-binary 50, anon-256K-4M 45, ...` in MB, largest first, zero parts left out (pure). */
export function formatParts(p: RssParts): string {
  return (Object.entries(p) as Array<[RssPart, number]>)
    .filter(([, v]) => v >= 0.05 * MiB)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${(v / MiB).toFixed(1)}`)
    .join(', ');
}

export interface RssPartsSampler {
  /** The composition of the largest sample so far (undefined before the first one). */
  peak(): RssParts | undefined;
  /** Stop sampling; resolves once the sampler is idle. */
  stop(): Promise<void>;
}

/**
 * Sample `pid`'s smaps every `intervalMs` until stopped or the process is gone; keep the largest.
 * Reading smaps walks the process's page tables (a few ms for the store): a bench-only cost.
 */
export function sampleRssParts(pid: number, intervalMs = 100): RssPartsSampler {
  let best: RssParts | undefined;
  let bestTotal = -1;
  let stopped = false;
  let wake: (() => void) | undefined;
  const loop = (async () => {
    while (!stopped) {
      let text: string;
      try {
        text = await readFile(`/proc/${pid}/smaps`, 'utf8');
      } catch {
        return; // the process ended
      }
      const parts = parseSmaps(text);
      const total = totalOf(parts);
      if (total > bestTotal) {
        best = parts;
        bestTotal = total;
      }
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, intervalMs).unref();
      });
    }
  })();
  return {
    peak: () => best,
    async stop() {
      stopped = true;
      wake?.();
      await loop;
    },
  };
}
