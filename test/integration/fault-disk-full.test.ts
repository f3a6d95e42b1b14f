/**
 * Issue 14, full disk: the chunk cache on a small tmpfs that fills up. Reads keep returning the
 * right bytes (verified, served without being cached), the log gets one warning for the
 * condition (not one per write), the failures are counted, and caching resumes with one info
 * line once space is freed. Needs root (mount -t tmpfs): fails loudly without it.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, rm, statfs, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import type { TreeNode } from '../../src/format/model.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import { buildFaultBlob, openFaultLayer, TreeChecker } from '../helpers/fault-layer.js';
import { captureLogger } from '../helpers/registry-log-capture.js';
import { makeTarFixture, seededRandom, sizeMix } from './engine-helpers.js';

const CHUNK = 64 * 1024;
let work: string;
let tree: string;
let tarPath: string;
let mnt: string;
let mounted = false;

beforeAll(async () => {
  ({ work, tree, tarPath } = await makeTarFixture('fault-disk-full-', sizeMix(CHUNK, 40, seededRandom(14))));
  mnt = join(work, 'small');
  await mkdir(mnt);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m,mode=0700', 'tmpfs', mnt]);
  mounted = true;
});
afterAll(async () => {
  if (mounted) execFileSync('umount', [mnt]);
  await rm(work, { recursive: true, force: true });
});

/** Write zeros until the filesystem refuses (ENOSPC); returns the filler's path. */
async function fill(dir: string, name: string): Promise<string> {
  const path = join(dir, name);
  const err = await writeFile(path, Buffer.alloc(16 << 20)).catch((e: unknown) => e);
  expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
  const st = await statfs(dir);
  expect(st.bavail).toBe(0);
  return path;
}

function lines(text: string, msg: string): Array<Record<string, unknown>> {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((o) => o.msg === msg || (typeof o.msg === 'string' && o.msg.startsWith(msg)));
}

describe.each(['estargz', 'zstd:chunked'] as const)('cache on a full filesystem (%s)', (format) => {
  it('serves correct bytes, warns once, counts, and resumes caching when space returns', async () => {
    const source = await FileRangeReader.open(await buildFaultBlob(work, tarPath, format, CHUNK));
    const root = join(mnt, format.replace(':', '-'));
    await mkdir(root);
    const { logger, text } = captureLogger();
    // the setup: no byte bound, no free-space margin; memory LRU off so every read decodes
    const cache = await ChunkCache.open({ root, minFreeBytes: 0, memoryBytes: 1, logger });
    await cache.whenScanned();
    const filler = await fill(mnt, `filler-${format.replace(':', '-')}`);
    const { index, layer } = await openFaultLayer({ source, cache, layerKey: `disk-full-${format}`, logger });
    const files = index.nodes.filter((n): n is TreeNode => n !== undefined && n.type === 'reg' && n.size > 0);
    const check = new TreeChecker(layer, files, tree);
    try {
      await check.readAll();
      await cache.flush();
      expect(check.wrong).toBe(0);
      const faults = cache.writeFaults.stats();
      expect(faults.failures).toBeGreaterThan(10);
      expect(faults.failing).toEqual(['ENOSPC']);
      expect(cache.stats().diskEntries).toBe(0);
      const warned = lines(text(), 'cannot write chunk to cache');
      expect(warned).toHaveLength(1);
      expect(warned[0]!.level).toBe(40);
      expect(warned[0]!.condition).toBe('ENOSPC');
      expect(lines(text(), 'cache writes resumed')).toHaveLength(0);

      // a second pass while still full: still correct, still one warning
      await check.readAll();
      await cache.flush();
      expect(check.wrong).toBe(0);
      expect(lines(text(), 'cannot write chunk to cache')).toHaveLength(1);

      // space returns: the next writes succeed, one info line, chunks land on disk
      await rm(filler);
      await check.readAll();
      await cache.flush();
      expect(check.wrong).toBe(0);
      const resumed = lines(text(), 'cache writes resumed');
      expect(resumed).toHaveLength(1);
      expect(resumed[0]!.level).toBe(30);
      expect(cache.writeFaults.stats().failing).toEqual([]);
      expect(cache.stats().diskEntries).toBeGreaterThan(0);
      console.log(
        `${format}: disk full: ${faults.failures} failed cache writes, 1 warning; ${check.bytesChecked} bytes checked, ${check.wrong} wrong`,
      );
    } finally {
      await cache.close();
      await source.close();
      // give the space back to the next format's run
      await rm(root, { recursive: true, force: true });
    }
  });
});
