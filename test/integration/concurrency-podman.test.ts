import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { enableMetrics } from '../../src/util/metrics.js';
import { deadlineExpiries } from '../helpers/concurrency.js';
import {
  assembleImage,
  busyboxLayerTar,
  encodeLayer,
  makeTar,
  pushImageHttp,
  type EncodedLayer,
  type LayerEncoding,
  type TarFile,
} from '../helpers/oci-image.js';
import { startMountedStore, type MountedStore } from '../helpers/mounted-store.js';
import { TestPodman } from '../helpers/podman.js';
import { captureLogger } from '../helpers/registry-log-capture.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

/**
 * 8 images in 3 formats (eStargz, one of them prioritised like `ctr-remote optimize`;
 * zstd:chunked; plain gzip) pulled and run by 8 Podmans at once against one store, twice: the
 * second round after rmi, with fresh Podman storages and the store's cache warm. Each container
 * hashes every regular file of its image; every hash is compared with the source tar.
 *
 * Podman 4.3.1 deadlocks when one storage does concurrent ALS pulls (storage.lock/layers.lock),
 * so each pull has its own storage (TestPodman: own graphroot/runroot, short paths) and all of
 * them use the same mount as additional layer store: the concurrency is the store's.
 */

const ROUNDS = 2;
const CHUNK = 64 << 10;
type Kind = LayerEncoding | 'estargz-prioritized';
const KINDS: Kind[] = [
  'estargz',
  'zstd:chunked',
  'gzip',
  'estargz-prioritized',
  'zstd:chunked',
  'gzip',
  'estargz',
  'zstd:chunked',
];
/** Data file sizes of each image (random content, distinct per image), off the chunk grid. */
const DATA_SIZES = [300_001, 150_000, CHUNK + 7, 20_000, 1];

interface TestImage {
  kind: Kind;
  ref: string;
  layers: EncodedLayer[];
  /** Absolute path in the container -> sha256 hex and size, for every regular file. */
  files: Map<string, { sha256: string; size: number }>;
}

const hex = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

function regularFiles(files: TarFile[]): Array<[string, Buffer]> {
  return files
    .filter((f) => (f.type ?? 'file') === 'file')
    .map((f) => ['/' + f.path, Buffer.from(f.content ?? '')]);
}

interface RunResult {
  files: number;
  bytes: number;
  mismatches: string[];
}

/** The container's `sha256sum` lines checked against the source files. */
function check(img: TestImage, stdout: string): RunResult {
  const seen = new Map<string, string>();
  for (const line of stdout.trim().split('\n')) {
    const m = /^([0-9a-f]{64}) {2}(.+)$/.exec(line);
    if (m) seen.set(m[2]!, m[1]!);
  }
  const out: RunResult = { files: 0, bytes: 0, mismatches: [] };
  for (const [path, want] of img.files) {
    const got = seen.get(path);
    if (got !== want.sha256) out.mismatches.push(`${img.ref} ${path}: ${got ?? 'missing'}`);
    else {
      out.files++;
      out.bytes += want.size;
    }
  }
  return out;
}

describe('8 images in 3 formats pulled and run in parallel through one store', () => {
  let registry: TestRegistry;
  let dir: string;
  let running: MountedStore;
  const logs = captureLogger('info');
  const images: TestImage[] = [];

  beforeAll(async () => {
    enableMetrics();
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-conc-pm-'));
    const baseFiles: TarFile[] = [];
    const baseTar = await busyboxLayerTar();
    const base = new Map<LayerEncoding, EncodedLayer>();
    for (const e of ['estargz', 'zstd:chunked', 'gzip'] as const)
      base.set(e, await encodeLayer(baseTar, e, { chunkSize: CHUNK }));
    baseFiles.push(
      { path: 'bin/busybox', content: await readFile('/bin/busybox') },
      { path: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\n' },
      { path: 'etc/group', content: 'root:x:0:\n' },
    );
    for (const [i, kind] of KINDS.entries()) {
      const dataFiles: TarFile[] = [
        { path: 'data/', type: 'directory' },
        { path: 'data/id.txt', content: `image ${i} ${kind}\n` },
        ...DATA_SIZES.map((n, k): TarFile => ({ path: `data/f${k}.bin`, content: randomBytes(n) })),
      ];
      const enc: LayerEncoding = kind === 'estargz-prioritized' ? 'estargz' : kind;
      const data = await encodeLayer(await makeTar(dataFiles), enc, {
        chunkSize: CHUNK,
        ...(kind === 'estargz-prioritized' ? { prioritize: ['data/f1.bin', 'data/id.txt'] } : {}),
      });
      const files = new Map<string, { sha256: string; size: number }>();
      for (const [p, c] of regularFiles([...baseFiles, ...dataFiles]))
        files.set(p, { sha256: hex(c), size: c.length });
      const layers = [base.get(enc)!, data];
      const ref = await pushImageHttp(
        registry.host,
        `conc/img${i}`,
        kind.replace(':', '-'),
        assembleImage(layers, {
          entrypoint: ['/bin/sh', '-c'],
          cmd: [`sha256sum ${[...files.keys()].join(' ')}`],
        }),
      );
      images.push({ kind, ref, layers, files });
    }
    running = await startMountedStore({
      root: join(dir, 'root'),
      mountpoint: join(dir, 'mnt'),
      requestTimeoutMs: 20_000,
      logger: logs.logger,
    });
  }, 300_000);

  afterAll(async () => {
    await running?.stop();
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 120_000);

  it(`${ROUNDS} rounds: every file of every image matches its tar, no deadline expiry`, async () => {
    const mnt = join(dir, 'mnt');
    let files = 0;
    let bytes = 0;
    const mismatches: string[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const envs = await Promise.all(
        images.map(() =>
          TestPodman.create({ insecureRegistries: [registry.host], additionalLayerStore: mnt }),
        ),
      );
      try {
        const t0 = Date.now();
        const results = await Promise.all(
          images.map(async (img, i) => {
            const pm = envs[i]!;
            await pm.podmanOk(['pull', '-q', '--tls-verify=false', img.ref], { timeoutMs: 240_000 });
            const run = await pm.podmanOk(['run', '--rm', img.ref], { timeoutMs: 240_000 });
            return check(img, run.stdout);
          }),
        );
        const ms = Date.now() - t0;
        for (const r of results) {
          files += r.files;
          bytes += r.bytes;
          mismatches.push(...r.mismatches);
        }
        // the lazy formats were served by the store (and referenced by this round's storages)
        const status = running.store.status();
        for (const img of images) {
          if (img.kind === 'gzip') continue;
          for (const l of img.layers) {
            const st = status.find((s) => s.ref === img.ref && s.digest === l.descriptor.digest);
            expect(st?.lazy, `${img.ref} ${l.descriptor.digest} served lazily`).toBe(true);
            expect(st!.refs, `${img.ref} in use in round ${round}`).toBeGreaterThan(0);
          }
        }
        console.log(`concurrency-podman: round ${round}: ${images.length} images pulled + run in ${ms} ms`);
      } finally {
        // rmi and a fresh storage for the next round (the store keeps its cache)
        await Promise.all(envs.map((e) => e.cleanup()));
      }
    }
    const want = images.reduce((n, img) => n + img.files.size, 0) * ROUNDS;
    console.log(
      `concurrency-podman: ${images.length} images x ${ROUNDS} rounds: ${files} files, ${bytes} bytes ` +
        `checked against the tars, ${mismatches.length} mismatches`,
    );
    expect(mismatches).toEqual([]);
    expect(files).toBe(want);
    expect(await deadlineExpiries()).toBe(0);
    expect(logs.text()).not.toMatch(/hit its deadline/);
  }, 900_000);
});
