import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { enableMetrics, resetMetrics } from '../../src/util/metrics.js';
import {
  deadlineExpiries,
  fuseReads,
  runReader,
  sumReaders,
  type ReaderFile,
} from '../helpers/concurrency.js';
import { assembleImage, encodeLayer, makeTar, pushImageHttp, type TarFile } from '../helpers/oci-image.js';
import { startMountedStore, type MountedStore } from '../helpers/mounted-store.js';
import { captureLogger } from '../helpers/registry-log-capture.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

/**
 * 32 reader processes x 1000 random reads on one lazily served layer (eStargz, then zstd:chunked),
 * each read compared
 * with the source bytes. 64 KiB chunks and reads of up to 96 KiB, so most reads span a chunk
 * boundary; no background fetch, so chunks are loaded on demand by readers racing for them; the
 * mount is read with O_DIRECT so every read reaches the store rather than the page cache.
 */

const READERS = 32;
const READS = 1000;
const CHUNK = 64 << 10;
/** Several MB of random content, sizes off the chunk grid. */
const SIZES = [(3 << 20) + 17, (1 << 20) + 4093, 700 << 10, 257 << 10, CHUNK + 1, 4000];

describe.each(['estargz', 'zstd:chunked'] as const)(
  '32 parallel readers on one %s layer through the mount',
  (format) => {
    let registry: TestRegistry;
    let dir: string;
    let running: MountedStore;
    const logs = captureLogger();
    const files: ReaderFile[] = [];

    beforeAll(async () => {
      enableMetrics();
      registry = await startRegistry();
      dir = await mkdtemp(join(tmpdir(), 'sgz-conc-rd-'));
      resetMetrics();
      await mkdir(join(dir, 'expected'));
      const tarFiles: TarFile[] = [{ path: 'data/', type: 'directory' }];
      const local: Array<{ name: string; size: number }> = [];
      for (const [i, size] of SIZES.entries()) {
        const content = randomBytes(size);
        const name = `f${i}.bin`;
        await writeFile(join(dir, 'expected', name), content);
        tarFiles.push({ path: `data/${name}`, content });
        local.push({ name, size });
      }
      const layer = await encodeLayer(await makeTar(tarFiles), format, { chunkSize: CHUNK });
      const ref = await pushImageHttp(
        registry.host,
        'conc/readers',
        format.replace(':', '-'),
        assembleImage([layer]),
      );
      running = await startMountedStore({
        root: join(dir, 'root'),
        mountpoint: join(dir, 'mnt'),
        layer: { backgroundFetch: false, prefetch: false },
        logger: logs.logger,
      });
      const diff = join(dir, 'mnt', Buffer.from(ref).toString('base64'), layer.descriptor.digest, 'diff');
      for (const f of local)
        files.push({
          path: join(diff, 'data', f.name),
          expected: join(dir, 'expected', f.name),
          size: f.size,
        });
    }, 120_000);

    afterAll(async () => {
      await running?.stop();
      await registry?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it(`${READERS} readers x ${READS} random reads: zero mismatches, no errors, no deadline expiry`, async () => {
      // all readers start cold at once: the first lookup and every chunk load are raced for
      const results = await Promise.all(
        Array.from({ length: READERS }, (_, i) =>
          runReader({ files, reads: READS, maxLength: 96 << 10, seed: i + 1, inFlight: 4, direct: true }),
        ),
      );
      const total = sumReaders(results);
      console.log(
        `concurrency-readers (${format}): ${READERS} readers, ${total.reads} reads, ${total.bytes} bytes compared, ` +
          `${total.mismatches} mismatches, ${total.errors} errors`,
      );
      expect(total.firstProblem).toBeNull();
      expect(total.mismatches).toBe(0);
      expect(total.errors).toBe(0);
      expect(total.reads).toBe(READERS * READS);
      // O_DIRECT: the reads reached the store (at least one FUSE read per read, more when split)
      const served = await fuseReads();
      console.log(`concurrency-readers (${format}): the store answered ${served} FUSE reads`);
      expect(served).toBeGreaterThanOrEqual(READERS * READS);
      expect(await deadlineExpiries()).toBe(0);
      expect(logs.text()).not.toMatch(/hit its deadline/);
    }, 240_000);
  },
);
