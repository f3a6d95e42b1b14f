import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { RegistryClient } from '../../src/registry/index.js';
import { createLayerStore, mountStore, type LayerStore, type StoreMount } from '../../src/store/index.js';
import { createLogger } from '../../src/util/logger.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { runChild, type ChildResult } from '../helpers/fuse.js';
import {
  assembleImage,
  buildTestLayer,
  makeTar,
  pushImage,
  startCountingProxy,
  type CountingProxy,
  type TarEntry,
} from '../helpers/store.js';
import { SHARED } from '../helpers/shared.js';
import { startServeCli } from '../helpers/serve-cli.js';
import { TS_CLI } from '../helpers/cli-store.js';

/**
 * Podman 4.3.1 (OLD protocol: lookups by blob digest) end to end against the store mounted by this
 * process: eStargz from our writer, eStargz from ctr-remote, zstd:chunked from `podman push`, plain
 * gzip. Every tool must be installed: a missing one fails the suite.
 */

const DATA_FILES = 64;
const FILE_SIZE = 1 << 20;
const LAB_CONTAINERS_CONF = `${SHARED}/lab/containers/containers.conf`;

interface PodmanEnv {
  env: NodeJS.ProcessEnv;
  dir: string;
}

async function makePodmanEnv(dir: string, registryHost: string, als?: string): Promise<PodmanEnv> {
  await mkdir(dir, { recursive: true });
  const storage = [
    '[storage]',
    'driver = "overlay"',
    `graphroot = "${dir}/graph"`,
    `runroot = "${dir}/run"`,
    '[storage.options]',
    als ? `additionallayerstores = ["${als}:ref"]` : '',
    '[storage.options.overlay]',
    'mountopt = "nodev"',
  ].join('\n');
  const lab = await readFile(LAB_CONTAINERS_CONF, 'utf8');
  const containers = lab
    .replace(/events_logfile_path = .*/, `events_logfile_path = "${dir}/events.log"`)
    .replace(/tmp_dir = .*/, `tmp_dir = "${dir}/libpod-tmp"`);
  const registries = [
    'unqualified-search-registries = []',
    '[[registry]]',
    `location = "${registryHost}"`,
    'insecure = true',
  ].join('\n');
  await writeFile(join(dir, 'storage.conf'), storage + '\n');
  await writeFile(join(dir, 'containers.conf'), containers);
  await writeFile(join(dir, 'registries.conf'), registries + '\n');
  return {
    dir,
    env: {
      ...process.env,
      CONTAINERS_STORAGE_CONF: join(dir, 'storage.conf'),
      CONTAINERS_CONF: join(dir, 'containers.conf'),
      CONTAINERS_REGISTRIES_CONF: join(dir, 'registries.conf'),
    },
  };
}

async function podman(p: PodmanEnv, args: string[], timeoutMs = 120_000): Promise<ChildResult> {
  return await runChild('podman', args, '', timeoutMs, p.env);
}

async function must(r: Promise<ChildResult>, what: string): Promise<ChildResult> {
  const x = await r;
  if (x.code !== 0) throw new Error(`${what} failed (${x.code}):\n${x.stdout}\n${x.stderr}`);
  return x;
}

describe('Podman 4.3.1 with the store as additional layer store', () => {
  let registry: TestRegistry;
  let proxy: CountingProxy;
  let dir: string;
  let mnt: string;
  let cache: ChunkCache;
  let client: RegistryClient;
  let store: LayerStore;
  let mount: StoreMount;
  let pm: PodmanEnv;
  let builder: PodmanEnv;
  let containerd: { pid: number; sock: string } | undefined;
  const dataLayerSize = new Map<string, number>();
  let expectedOut: string;
  const images: Record<string, string> = {};
  const logLines: string[] = [];

  const startStore = async () => {
    const logger = createLogger('info');
    store = createLayerStore({
      root: join(dir, 'root'),
      registry: client,
      cache,
      logger,
      // no background fetch: the registry byte count then shows what the container really read
      layer: { backgroundFetch: false },
    });
    mount = await mountStore(mnt, store, { allowOther: true });
  };

  beforeAll(async () => {
    for (const tool of ['podman', 'ctr-remote', 'containerd', 'busybox']) {
      const w = await runChild('sh', ['-c', `command -v ${tool}`]);
      if (w.code !== 0) throw new Error(`${tool} is not installed: the Podman end-to-end suite needs it`);
    }
    registry = await startRegistry();
    proxy = await startCountingProxy(registry.host);
    dir = await mkdtemp(join(tmpdir(), 'sgz-podman-'));
    mnt = join(dir, 'store');
    await mkdir(mnt);

    // One layer: busybox-static + 64 MiB of incompressible data; the entrypoint reads two files.
    const busybox = await readFile('/bin/busybox');
    const entries: TarEntry[] = [
      { name: 'bin/', type: 'directory' },
      { name: 'bin/busybox', content: busybox, mode: 0o755 },
      ...['sh', 'cat', 'head', 'sha256sum', 'ls', 'true'].map((n) => ({
        name: `bin/${n}`,
        type: 'symlink' as const,
        linkname: 'busybox',
      })),
      { name: 'data/', type: 'directory' },
      { name: 'data/hello.txt', content: 'hello from a lazy layer\n' },
    ];
    let probeFile = Buffer.alloc(0);
    for (let i = 0; i < DATA_FILES; i++) {
      const content = randomBytes(FILE_SIZE);
      if (i === 7) probeFile = content;
      entries.push({ name: `data/blob-${String(i).padStart(2, '0')}.bin`, content });
    }
    // each image gets its own marker file: equal DiffIDs would let c/storage share one layer
    // between images (OLD layer ID = DiffID) and hide the per-image behaviour
    const tarFor = (variant: string) => makeTar([...entries, { name: 'data/variant.txt', content: variant }]);
    expectedOut = `hello from a lazy layer\n${createHash('sha256').update(probeFile.subarray(0, 4096)).digest('hex')}  -\n`;
    const cmd = {
      Entrypoint: ['/bin/sh', '-c'],
      Cmd: ['cat /data/hello.txt && head -c 4096 /data/blob-07.bin | sha256sum'],
    };
    const ours = assembleImage([await buildTestLayer(await tarFor('ours'), 'estargz')], cmd);
    const gz = assembleImage([await buildTestLayer(await tarFor('gzip'), 'gzip')], cmd);
    const src = assembleImage([await buildTestLayer(await tarFor('src'), 'gzip')], cmd);
    await pushImage(registry.url, 'e2e/app', 'esgz-ours', ours);
    await pushImage(registry.url, 'e2e/app', 'gzip', gz);
    await pushImage(registry.url, 'e2e/app', 'src', src);
    for (const img of [ours, gz])
      dataLayerSize.set(img.layers[0]!.descriptor.digest, img.layers[0]!.descriptor.size);
    images.ours = `${proxy.host}/e2e/app:esgz-ours`;
    images.gzip = `${proxy.host}/e2e/app:gzip`;

    // zstd:chunked by podman itself (a separate storage without the ALS; a private blob-info-cache
    // so c/image cannot silently reuse the gzip blobs, lab NOTES §4)
    builder = await makePodmanEnv(join(dir, 'builder'), registry.host);
    await must(
      podman(builder, ['pull', '-q', '--tls-verify=false', `${registry.host}/e2e/app:src`]),
      'builder pull',
    );
    await must(
      runChild(
        'unshare',
        [
          '-m',
          'sh',
          '-c',
          `mount -t tmpfs tmpfs /var/lib/containers/cache 2>/dev/null || { mkdir -p /var/lib/containers/cache && mount -t tmpfs tmpfs /var/lib/containers/cache; }; ` +
            `podman push -q --tls-verify=false --compression-format zstd:chunked ${registry.host}/e2e/app:src ${registry.host}/e2e/app:zstd-chunked`,
        ],
        '',
        180_000,
        builder.env,
      ),
      'podman push zstd:chunked',
    );
    images.zstd = `${proxy.host}/e2e/app:zstd-chunked`;

    // eStargz by ctr-remote through a private containerd
    const cdir = join(dir, 'containerd');
    await mkdir(cdir, { recursive: true });
    const sock = join(cdir, 'c.sock');
    await writeFile(
      join(cdir, 'config.toml'),
      [
        'version = 2',
        `root = "${cdir}/root"`,
        `state = "${cdir}/state"`,
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
        '[grpc]',
        `  address = "${sock}"`,
        '[ttrpc]',
        `  address = "${sock}.ttrpc"`,
        '[debug]',
        '  address = ""',
        '[metrics]',
        '  address = ""',
      ].join('\n') + '\n',
    );
    const { spawn } = await import('node:child_process');
    const cd = spawn('containerd', ['--config', join(cdir, 'config.toml')], {
      stdio: 'ignore',
      detached: false,
    });
    containerd = { pid: cd.pid!, sock };
    for (let i = 0; i < 100; i++) {
      if ((await runChild('ctr', ['-a', sock, 'version'])).code === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const ctr = (args: string[]) => runChild('ctr-remote', ['-a', sock, '-n', 'e2e', ...args], '', 240_000);
    await must(ctr(['images', 'pull', '--plain-http', `${registry.host}/e2e/app:src`]), 'ctr pull');
    await must(
      ctr([
        'images',
        'convert',
        '--estargz',
        '--oci',
        `${registry.host}/e2e/app:src`,
        `${registry.host}/e2e/app:esgz-ctr`,
      ]),
      'ctr-remote convert',
    );
    await must(ctr(['images', 'push', '--plain-http', `${registry.host}/e2e/app:esgz-ctr`]), 'ctr push');
    images.ctr = `${proxy.host}/e2e/app:esgz-ctr`;

    // learn the data layer sizes of the converted images (for the transfer ratio)
    for (const tag of ['zstd-chunked', 'esgz-ctr']) {
      const res = await fetch(`${registry.url}/v2/e2e/app/manifests/${tag}`, {
        headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
      });
      const m = (await res.json()) as { layers: Array<{ digest: string; size: number }> };
      for (const l of m.layers) dataLayerSize.set(l.digest, l.size);
    }

    cache = await ChunkCache.open({ root: join(dir, 'root') });
    client = new RegistryClient({ requestTimeoutMs: 20_000 });
    pm = await makePodmanEnv(join(dir, 'podman'), proxy.host, mnt);
    await startStore();
  }, 300_000);

  afterAll(async () => {
    if (pm) {
      await podman(pm, ['rm', '-af']).catch(() => undefined);
      await podman(pm, ['rmi', '-af']).catch(() => undefined);
    }
    if (builder) await podman(builder, ['rmi', '-af']).catch(() => undefined);
    await mount?.unmount().catch(() => undefined);
    await store?.close().catch(() => undefined);
    await client?.close();
    if (containerd) {
      try {
        process.kill(containerd.pid, 'SIGTERM');
      } catch {
        /* already gone */
      }
    }
    await proxy?.stop();
    await registry?.stop();
    await runChild('sh', ['-c', `grep -o ' ${dir}[^ ]*' /proc/mounts | xargs -r -n1 umount -l`]).catch(
      () => undefined,
    );
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    void logLines;
  }, 120_000);

  for (const [name, lazy] of [
    ['ours', true],
    ['ctr', true],
    ['zstd', true],
    ['gzip', false],
  ] as const) {
    it(`${name}: podman pull + run ${lazy ? 'lazily through the store' : 'with a normal pull fallback'}`, async () => {
      const ref = images[name]!;
      const before = new Map(proxy.bytesByDigest);
      const pull = await must(
        podman(pm, ['pull', '--tls-verify=false', ref], 180_000),
        `podman pull ${name}`,
      );
      const run = await must(podman(pm, ['run', '--rm', ref], 120_000), `podman run ${name}`);
      expect(run.stdout).toBe(expectedOut);
      const layers = store.status().filter((s) => s.ref === ref);
      const dataDigests = [...dataLayerSize.keys()].filter((d) => layers.some((l) => l.digest === d));
      expect(dataDigests.length).toBe(1);
      const d = dataDigests[0]!;
      const st = layers.find((l) => l.digest === d)!;
      const fetched = (proxy.bytesByDigest.get(d) ?? 0) - (before.get(d) ?? 0);
      const size = dataLayerSize.get(d)!;
      // the layer's diff in c/storage is a symlink into the store (als-client.md §8.3), or a real dir
      const upper = (
        await must(
          podman(pm, ['image', 'inspect', '--format', '{{.GraphDriver.Data.UpperDir}}', ref]),
          'inspect',
        )
      ).stdout.trim();
      const link = await runChild('readlink', [upper]);
      void pull;
      if (lazy) {
        expect(link.stdout.trim().startsWith(mnt + '/')).toBe(true);
        expect(st.lazy).toBe(true);
        expect(st.refs).toBeGreaterThan(0);
        // the container read busybox + two small files of a ~66 MiB layer
        expect(fetched / size).toBeLessThan(0.15);
        console.log(
          `${name}: registry sent ${fetched} of ${size} layer bytes (${((100 * fetched) / size).toFixed(1)} %)`,
        );
      } else {
        expect(link.code).not.toBe(0);
        expect(st.lazy).toBe(false);
        expect(st.reason).toMatch(/no TOC/);
        expect(fetched).toBeGreaterThanOrEqual(size);
      }
    });
  }

  it('podman rmi releases the layers (use count back to 0)', async () => {
    const ref = images.zstd!;
    const d = [...dataLayerSize.keys()].find((x) =>
      store.status().some((s) => s.ref === ref && s.digest === x && s.lazy),
    )!;
    expect(store.status().find((s) => s.ref === ref && s.digest === d)!.refs).toBeGreaterThan(0);
    await must(podman(pm, ['rmi', ref]), 'podman rmi');
    expect(store.status().find((s) => s.ref === ref && s.digest === d)!.refs).toBe(0);
  });

  it('after a store restart, podman run of an already-pulled lazy image works', async () => {
    await mount.unmount();
    await store.close();
    await startStore();
    for (const name of ['ours', 'ctr']) {
      const run = await must(
        podman(pm, ['run', '--rm', images[name]!], 120_000),
        `podman run ${name} after restart`,
      );
      expect(run.stdout).toBe(expectedOut);
    }
  });

  it('the real CLI: SIGTERM unmounts cleanly and a new process serves the already-pulled lazy image', async () => {
    await mount.unmount();
    await store.close();
    const cfg = join(dir, 'config.toml');
    await writeFile(cfg, '');
    const { isMountpoint } = await import('../../src/store/index.js');
    for (let round = 0; round < 2; round++) {
      // the TypeScript sources through the engine's loader hooks (no dist/ build needed)
      const cli = await startServeCli({
        cli: TS_CLI,
        config: cfg,
        root: join(dir, 'root'),
        addr: join(dir, 'store.sock'),
        mountpoint: mnt,
        notifySocket: join(dir, `notify-${round}.sock`),
      });
      try {
        const run = await must(
          podman(pm, ['run', '--rm', images.ours!], 120_000),
          `podman run via CLI store (round ${round})`,
        );
        expect(run.stdout).toBe(expectedOut);
      } finally {
        cli.child.kill('SIGTERM');
      }
      expect((await cli.exited).code).toBe(0);
      expect(await isMountpoint(mnt)).toBe(false);
      expect(cli.stderr()).toMatch(/remote-snapshot-prepared/);
    }
  });
});
