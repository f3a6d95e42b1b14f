import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { orderByAge } from '../../src/cache/scan.js';

describe('orderByAge', () => {
  it('property: a permutation of the input whose mtimes are ordered up to the bucket width', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 0, max: 1_000_000 }), { maxLength: 300 }),
        async (mtimes) => {
          const found = mtimes.map((m, i) => ({ hex: String(i), size: 1, mtimeMs: m }));
          const out = await orderByAge(found, 7);
          expect(out.map((f) => f.hex).sort()).toEqual(found.map((f) => f.hex).sort());
          if (out.length < 2) return;
          const width = (Math.max(...mtimes) - Math.min(...mtimes)) / Math.min(4096, mtimes.length) || 1;
          for (let i = 1; i < out.length; i++) {
            expect(out[i]!.mtimeMs).toBeGreaterThan(out[i - 1]!.mtimeMs - width - 1e-6);
          }
        },
      ),
    );
  });
});

describe('start-up scan of a large cache', () => {
  it('indexes 20 000 files in the background without stalling the event loop', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cache-scan-'));
    try {
      const base = join(root, 'cache', 'chunks', 'sha256');
      const n = 20_000;
      for (let d = 0; d < 256; d++)
        await mkdir(join(base, d.toString(16).padStart(2, '0')), { recursive: true });
      const now = Date.now() / 1000;
      for (let i = 0; i < n; i += 500) {
        await Promise.all(
          Array.from({ length: Math.min(500, n - i) }, async (_, k) => {
            // names only need the right shape for the scan; content is checked on read
            const hex = (i + k)
              .toString(16)
              .padStart(64, '0')
              .replace(/^../, ((i + k) % 256).toString(16).padStart(2, '0'));
            const file = join(base, hex.slice(0, 2), hex);
            await writeFile(file, 'x');
            await utimes(file, now - (i + k), now - (i + k));
          }),
        );
      }
      // "Without stalling" is counted in event-loop turns, not milliseconds (machine speed): a
      // scan that yields lets a setImmediate chain run many times before it completes.
      let turns = 0;
      let scanning = true;
      const spin = (): void => {
        turns++;
        if (scanning) setImmediate(spin);
      };
      setImmediate(spin);
      const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
      expect(cache.stats().scanComplete).toBe(false);
      await cache.whenScanned();
      scanning = false;
      expect(cache.stats().diskEntries).toBe(n);
      // 256 directories of ~80 entries each: at least one turn per directory read
      expect(turns).toBeGreaterThan(100);
      await cache.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
