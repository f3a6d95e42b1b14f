/**
 * The engine over the real test registry (docker-registry on 127.0.0.1): exact file bytes from
 * lazily fetched chunks, the DiffID check through the registry, and a restart in a NEW PROCESS
 * on the same root that serves everything from the cache with zero registry requests.
 */
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import { parseReference, RegistryClient } from '../../src/registry/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { pushBlob } from './engine-helpers.js';
import { SHARED } from '../helpers/shared.js';
import { parseDigest } from '../../src/util/digest.js';

const execFileAsync = promisify(execFile);
const SAMPLES = `${SHARED}/samples/tiny`;
const HERE = new URL('.', import.meta.url).pathname;

const CASES = [
  { name: 'estargz', dir: 'estargz', file: 'layer1-f0e382bf7d85.tar.gz', layer: 1 },
  { name: 'zstd:chunked (podman)', dir: 'zstd-chunked', file: 'layer0-9b70c3633ed7.tar.zst', layer: 0 },
  {
    name: 'zstd:chunked (ctr-remote)',
    dir: 'ctr-zstdchunked',
    file: 'layer1-bab66c17883e.tar.zst',
    layer: 1,
  },
];

const sha256 = (b: Buffer): string => 'sha256:' + createHash('sha256').update(b).digest('hex');

let registry: TestRegistry;
let work: string;
beforeAll(async () => {
  registry = await startRegistry();
  work = await mkdtemp(join(tmpdir(), 'engine-registry-'));
});
afterAll(async () => {
  await registry?.stop();
  await rm(work, { recursive: true, force: true });
});

/** Access-log lines of blob requests (GET/HEAD on /v2/<repo>/blobs/...). */
function blobRequests(): number {
  return registry.log.filter((l) => /(GET|HEAD) \/v2\/[^ ]*\/blobs\//.test(l)).length;
}

describe.each(CASES)('engine over the real registry: $name', (c) => {
  it('reads exact bytes, verifies the DiffID, and a new process serves it with zero requests', async () => {
    const blobFile = join(SAMPLES, c.dir, c.file);
    const blob = await readFile(blobFile);
    const repo = `engine/${c.dir}`;
    const digest = await pushBlob(registry.url, repo, blob);
    const config = JSON.parse(await readFile(join(SAMPLES, c.dir, 'config.json'), 'utf8')) as {
      rootfs: { diff_ids: string[] };
    };
    const diffID = config.rootfs.diff_ids[c.layer]!;

    // expected bytes: GNU tar on the whole decompressed blob
    const extract = await mkdtemp(join(work, 'x-'));
    const tool = c.file.endsWith('.gz') ? 'gzip' : 'zstd';
    execFileSync('sh', ['-c', `${tool} -dc "$1" | tar -x -C "$2"`, 'sh', blobFile, extract]);

    const root = await mkdtemp(join(work, 'root-'));
    const local = await FileRangeReader.open(blobFile);
    const index = await openLayer(local);
    await local.close();
    const client = new RegistryClient({});
    const ref = parseReference(`${registry.host}/${repo}:latest`);
    const reader = await client.openBlob(ref, parseDigest(digest), { size: blob.length });
    const cache = await ChunkCache.open({ root, minFreeBytes: 0 });
    const expected: Record<string, string> = {};
    try {
      const layer = new LazyLayer({
        index,
        source: reader,
        cache,
        layerKey: digest,
        backgroundFetch: false,
        prefetch: false,
        scheduler: new FetchScheduler({ quietMs: 0 }),
      });
      const regs = index.nodes.filter((n) => n !== undefined && n.type === 'reg');
      // read only half of the files first: the rest must come from the registry later
      const firstHalf = regs.slice(0, Math.ceil(regs.length / 2));
      for (const n of regs) {
        const want = await readFile(join(extract, n.path));
        expected[n.path] = sha256(want);
      }
      for (const n of firstHalf) {
        const got = await layer.read(n, 0, n.size);
        expect(got.equals(await readFile(join(extract, n.path))), n.path).toBe(true);
      }
      expect(reader.stats().requests).toBeGreaterThan(0);

      // background pass through the registry: everything cached, DiffID matches the config
      const bg = new LazyLayer({
        index,
        source: reader,
        cache,
        layerKey: digest,
        expectedDiffID: diffID,
        backgroundUnitBytes: 512 * 1024,
        scheduler: new FetchScheduler({ quietMs: 0 }),
      });
      bg.start();
      await bg.whenBackgroundDone();
      expect(bg.state()).toMatchObject({ fullyVerified: true, bad: false, percent: 100 });
    } finally {
      await cache.close();
      await client.close();
    }

    // a new process on the same root
    const before = blobRequests();
    expect(before).toBeGreaterThan(0);
    const { stdout } = await execFileAsync(
      process.execPath,
      [
        '--import',
        join(HERE, 'engine-ts-loader.mjs'),
        join(HERE, 'engine-restart-child.ts'),
        JSON.stringify({ root, blobFile, ref: ref.toString(), digest, expected }),
      ],
      { cwd: join(HERE, '..', '..') },
    );
    const out = JSON.parse(stdout.trim().split('\n').pop()!) as {
      files: number;
      mismatches: number;
      opened: boolean;
      requests: number;
    };
    expect(out.files).toBe(Object.keys(expected).length);
    expect(out.mismatches).toBe(0);
    expect(out.opened).toBe(false);
    expect(out.requests).toBe(0);
    // give the registry a moment to flush its access log, then compare
    await new Promise((r) => setTimeout(r, 300));
    expect(blobRequests()).toBe(before);
  });
});
