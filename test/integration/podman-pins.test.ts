import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { controlRequest } from '../../src/store/control-socket.js';
import type { PinStatus } from '../../src/store/pins.js';
import { waitForPins } from '../../src/cli/pin-command.js';
import { StoreSlot } from '../helpers/mounted-store.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { runChild, type ChildResult } from '../helpers/fuse.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, type TarEntry } from '../helpers/store.js';
import { SHARED } from '../helpers/shared.js';

/**
 * The pinned-image promise end to end with Podman 4.3.1: pull through the store, pin, stop the
 * registry, restart the store, and `podman run` reads every byte of a file it never read before.
 */
describe('Podman runs a pinned image with the registry gone', () => {
  let registry: TestRegistry;
  let dir: string;
  let mnt: string;
  let sock: string;
  let env: NodeJS.ProcessEnv;
  const slot = new StoreSlot();
  let ref = '';
  let big = Buffer.alloc(0);
  let layerDigest = '';

  const podman = (args: string[], timeoutMs = 180_000): Promise<ChildResult> =>
    runChild('podman', args, '', timeoutMs, env);
  const must = async (r: Promise<ChildResult>, what: string): Promise<ChildResult> => {
    const x = await r;
    if (x.code !== 0) throw new Error(`${what} failed (${x.code}):\n${x.stdout}\n${x.stderr}`);
    return x;
  };

  const start = async () => {
    const root = join(dir, 'root');
    return await slot.start({
      root,
      mountpoint: mnt,
      controlSocket: sock,
      deadlines: { lookupMs: 5000, readMs: 5000, syntheticMs: 2000 },
      layer: { backgroundFetch: true, prefetch: false, stateDir: join(root, 'layer-state') },
    });
  };
  const stop = (): Promise<void> => slot.stop();

  beforeAll(async () => {
    const w = await runChild('sh', ['-c', 'command -v podman']);
    if (w.code !== 0) throw new Error('podman is not installed: this suite needs it');
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-podman-pins-'));
    mnt = join(dir, 'store');
    sock = join(dir, 'store.sock');
    await mkdir(mnt);
    big = randomBytes(3 << 20);
    const entries: TarEntry[] = [
      { name: 'bin/', type: 'directory' },
      { name: 'bin/busybox', content: await readFile('/bin/busybox'), mode: 0o755 },
      ...['sh', 'cat', 'sha256sum'].map((n) => ({
        name: `bin/${n}`,
        type: 'symlink' as const,
        linkname: 'busybox',
      })),
      { name: 'data/', type: 'directory' },
      { name: 'data/big.bin', content: big },
      { name: 'data/hello.txt', content: 'hello from a pinned layer\n' },
    ];
    const img = assembleImage([await buildTestLayer(await makeTar(entries), 'estargz')], {
      Entrypoint: ['/bin/sh', '-c'],
      Cmd: ['cat /data/hello.txt'],
    });
    layerDigest = img.layers[0]!.descriptor.digest;
    await pushImage(registry.url, 'e2e/pinned', 'v1', img);
    ref = `${registry.host}/e2e/pinned:v1`;

    const pdir = join(dir, 'podman');
    await mkdir(pdir, { recursive: true });
    const lab = await readFile(`${SHARED}/lab/containers/containers.conf`, 'utf8');
    await writeFile(
      join(pdir, 'storage.conf'),
      [
        '[storage]',
        'driver = "overlay"',
        `graphroot = "${pdir}/graph"`,
        `runroot = "${pdir}/run"`,
        '[storage.options]',
        `additionallayerstores = ["${mnt}:ref"]`,
        '[storage.options.overlay]',
        'mountopt = "nodev"',
      ].join('\n') + '\n',
    );
    await writeFile(
      join(pdir, 'containers.conf'),
      lab
        .replace(/events_logfile_path = .*/, `events_logfile_path = "${pdir}/events.log"`)
        .replace(/tmp_dir = .*/, `tmp_dir = "${pdir}/libpod-tmp"`),
    );
    await writeFile(
      join(pdir, 'registries.conf'),
      `unqualified-search-registries = []\n[[registry]]\nlocation = "${registry.host}"\ninsecure = true\n`,
    );
    env = {
      ...process.env,
      CONTAINERS_STORAGE_CONF: join(pdir, 'storage.conf'),
      CONTAINERS_CONF: join(pdir, 'containers.conf'),
      CONTAINERS_REGISTRIES_CONF: join(pdir, 'registries.conf'),
    };
  });

  afterAll(async () => {
    if (env) {
      // bounded like the shared helper's clean-up (test/helpers/podman.ts): a Podman slowed down by
      // other suites must not outlast the hook
      await podman(['rm', '-af', '-t', '0'], 60_000).catch(() => undefined);
      await podman(['rmi', '-af'], 60_000).catch(() => undefined);
    }
    await stop().catch(() => undefined);
    await registry?.stop();
    await runChild('sh', ['-c', `grep -o ' ${dir}[^ ]*' /proc/mounts | xargs -r -n1 umount -l`]).catch(
      () => undefined,
    );
    await rm(dir, { recursive: true, force: true });
  }, 240_000);

  it('pull, pin, registry stopped, store restarted: podman run reads the whole pinned file', async () => {
    const r1 = await start();
    await must(podman(['pull', '-q', '--tls-verify=false', ref]), 'podman pull');
    await controlRequest(sock, { op: 'pinAdd', refs: [ref] }, { timeoutMs: 60_000 });
    const pinned = await waitForPins(sock, [ref], () => undefined, 100);
    expect(pinned[0]?.error).toBeUndefined();
    expect(pinned[0]?.state).toBe('pinned');
    expect(r1.cache.isPinned(layerDigest)).toBe(true);
    await stop();

    await registry.stop();
    const r2 = await start();
    const resumed = await waitForPins(sock, [ref], () => undefined, 100);
    expect(resumed.map((p: PinStatus) => p.state)).toEqual(['pinned']);
    const run = await must(
      podman([
        'run',
        '--rm',
        '--entrypoint',
        '/bin/sh',
        ref,
        '-c',
        'cat /data/hello.txt && sha256sum /data/big.bin',
      ]),
      'podman run',
    );
    expect(run.stdout).toBe(
      `hello from a pinned layer\n${createHash('sha256').update(big).digest('hex')}  /data/big.bin\n`,
    );

    await controlRequest(sock, { op: 'pinRm', refs: [ref] });
    expect(r2.cache.isPinned(layerDigest)).toBe(false);
  });
});
