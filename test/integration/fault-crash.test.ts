/**
 * Issue 14, crashes: the real CLI store (a child process) SIGKILLs itself at an injected point
 * (STARGZ_STORE_CRASH_AT, src/util/crash-points.ts) while reads go through its mount: in the
 * middle of a FUSE read, between a chunk's temp write and its rename, in the middle of a
 * background unit, between a metadata file's temp write and its rename (resolution record, layer
 * state). Then the next normal start on the same root clears the dead mount and serves: every
 * file of the layer read through the mount (from another process) matches the source bytes,
 * `stargz-store check --root` finds the root clean, and Podman runs the image after a crash.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCheck } from '../../src/cli/check-command.js';
import { probe, runChild } from '../helpers/fuse.js';
import { runCommand, TestPodman } from '../helpers/podman.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { startServeCli, type ServeCli } from '../helpers/serve-cli.js';
import { TS_CLI } from '../helpers/cli-store.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, type TarEntry } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const hex = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Config of a run: lazy (only what is read is fetched) or with the background fetch + DiffID check. */
const LAZY = 'noprefetch = true\nno_background_fetch = true\n';
const BACKGROUND = 'noprefetch = true\n[background]\nquiet_ms = 0\nbandwidth_bytes_per_sec = 0\n';
const COMMON =
  '[registry]\nregistries_conf = ""\n[deadlines]\nlookup_sec = 20\nread_sec = 20\nfuse_sec = 30\n';

describe('SIGKILL at injected points, then a normal restart on the same root', () => {
  let registry: TestRegistry;
  let dir: string;
  let ref: string;
  let digest: string;
  const files = new Map<string, Buffer>();
  const started: ServeCli[] = [];
  const mounts: string[] = [];
  let bytesChecked = 0;
  let wrongBytes = 0;
  let faults = 0;

  beforeAll(async () => {
    for (const tool of ['podman', 'busybox', 'fusermount', 'python3']) {
      const w = await runChild('sh', ['-c', `command -v ${tool}`]);
      if (w.code !== 0) throw new Error(`${tool} is not installed: the crash suite needs it`);
    }
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-crash-'));
    const busybox = await readFile('/bin/busybox');
    const entries: TarEntry[] = [
      { name: 'bin/', type: 'directory' },
      { name: 'bin/busybox', content: busybox, mode: 0o755 },
      ...['sh', 'cat', 'sha256sum'].map((n) => ({
        name: `bin/${n}`,
        type: 'symlink' as const,
        linkname: 'busybox',
      })),
      { name: 'data/', type: 'directory' },
      { name: 'data/hello.txt', content: 'hello after a crash\n' },
    ];
    files.set('bin/busybox', busybox);
    files.set('data/hello.txt', Buffer.from('hello after a crash\n'));
    // several chunks and several background units: random (incompressible) and text files
    for (let i = 0; i < 12; i++) {
      const content =
        i % 2 === 0
          ? randomBytes(384 * 1024 + i)
          : Buffer.from(`line ${i} of a compressible file\n`.repeat(8000 + i * 100));
      const name = `data/f${String(i).padStart(2, '0')}.bin`;
      entries.push({ name, content });
      files.set(name, content);
    }
    const img = assembleImage([await buildTestLayer(await makeTar(entries), 'estargz')], {
      Entrypoint: ['/bin/sh', '-c'],
      Cmd: ['cat /data/hello.txt && sha256sum /data/f03.bin'],
    });
    await pushImage(registry.url, 'crash/app', 'v1', img);
    ref = `${registry.host}/crash/app:v1`;
    digest = img.layers[0]!.descriptor.digest;
  }, 120_000);

  afterAll(async () => {
    for (const p of started) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill('SIGKILL'); // our own child, by its PID
        await p.exited;
      }
    }
    for (const m of mounts) await runCommand(['fusermount', '-uz', m]);
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
    console.log(
      `crash: ${faults} faults injected (SIGKILL), ${faults} restarts, ${bytesChecked} bytes checked, ${wrongBytes} wrong`,
    );
  });

  /** `stargz-store serve` from the sources; resolves once it sent READY=1 (the mount answers). */
  async function startStore(name: string, root: string, mnt: string, config: string, crashAt?: string) {
    const cfg = join(dir, `${name}.toml`);
    await writeFile(cfg, config + COMMON);
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.STARGZ_STORE_CRASH_AT;
    if (crashAt !== undefined) env.STARGZ_STORE_CRASH_AT = crashAt;
    return await startServeCli({
      cli: TS_CLI,
      config: cfg,
      root,
      addr: join(dir, `${name}.sock`),
      mountpoint: mnt,
      notifySocket: join(dir, `${name}-${started.length}.notify`),
      env,
      onSpawn: (p) => started.push(p),
    });
  }

  /** Every file of the layer through the mount (another process), against the source bytes. */
  async function checkAllFiles(mnt: string): Promise<void> {
    const diff = join(mnt, b64(ref), digest, 'diff');
    const names = [...files.keys()];
    const got = (await probe(names.map((n) => ({ op: 'sha256' as const, path: join(diff, n) })))) as Array<{
      sha256?: string;
      length?: number;
      errno?: string;
    }>;
    names.forEach((n, i) => {
      const want = files.get(n)!;
      const g = got[i]!;
      expect(g.errno, `${n}: ${JSON.stringify(g)}`).toBeUndefined();
      if (g.sha256 !== `sha256:${hex(want)}` || g.length !== want.length) wrongBytes += want.length;
      expect(g).toEqual({ sha256: `sha256:${hex(want)}`, length: want.length });
      bytesChecked += want.length;
    });
  }

  /** `stargz-store check --root` (its command function, in this process: the store is stopped). */
  async function storeCheck(root: string): Promise<{ code: number; out: string }> {
    const r = await runCheck({ root });
    return { code: r.code, out: r.output };
  }

  /**
   * One fault: start with the hook, drive `drive` until the store kills itself, check the mount
   * is dead, start normally on the same root (clears the dead mount), read everything, stop, check.
   */
  async function crashAndRecover(
    name: string,
    crashAt: string,
    config: string,
    drive: (diff: string) => Promise<unknown>,
    opts: { leftTemp?: string; after?: (mnt: string) => Promise<void> } = {},
  ): Promise<void> {
    const root = join(dir, name, 'root');
    const mnt = join(dir, name, 'mnt');
    await mkdir(mnt, { recursive: true });
    mounts.push(mnt);
    const t0 = Date.now();
    const crashing = await startStore(name, root, mnt, config, crashAt);
    const tStarted = Date.now();
    const diff = join(mnt, b64(ref), digest, 'diff');
    // the reader sees the store die under it: its result is whatever the dead mount answers
    const driving = drive(diff).catch(() => undefined);
    const exit = await crashing.exited;
    expect(exit, `${name}: the store must die at ${crashAt}\n${crashing.stderr()}`).toEqual({
      code: null,
      signal: 'SIGKILL',
    });
    faults++;
    const tCrashed = Date.now();
    await driving;
    // a dead mount: the kernel answers ENOTCONN until the next start clears it
    const dead = await stat(mnt).then(
      () => 'alive',
      (e: NodeJS.ErrnoException) => e.code,
    );
    expect(dead).toMatch(/^(ENOTCONN|ECONNABORTED)$/);
    if (opts.leftTemp !== undefined) {
      // the kill came between the temp file's write and its rename: the temp is still there
      const left = await readdir(join(root, opts.leftTemp));
      // (at least the one killed there: other writes of the same pass may be half way too)
      const temps = left.filter((n) => opts.leftTemp === 'cache/tmp' || n.endsWith('.tmp'));
      expect(temps.length).toBeGreaterThanOrEqual(1);
    }

    const again = await startStore(name, root, mnt, LAZY);
    const tRestarted = Date.now();
    await checkAllFiles(mnt);
    await opts.after?.(mnt);
    again.child.kill('SIGTERM');
    expect(await again.exited).toEqual({ code: 0, signal: null });
    const check = await storeCheck(root);
    expect(check.out).toMatch(/: clean/);
    expect(check.code, check.out).toBe(0);
    console.log(
      `crash ${crashAt}: start ${tStarted - t0} ms, killed after ${tCrashed - tStarted} ms, ` +
        `restart ${tRestarted - tCrashed} ms, reads + checks ${Date.now() - tRestarted} ms`,
    );
  }

  const readSome = (diff: string) =>
    probe(
      ['data/f00.bin', 'data/f01.bin', 'data/f02.bin', 'data/f03.bin'].map((f) => ({
        op: 'sha256',
        path: join(diff, f),
      })),
    );

  it('in the middle of a FUSE read (bytes fetched, not answered); then Podman runs the image', async () => {
    const after = async (mnt: string): Promise<void> => {
      const pm = await TestPodman.create({ insecureRegistries: [registry.host], additionalLayerStore: mnt });
      try {
        const run = await pm.podmanOk(['run', '--rm', ref], { timeoutMs: 120_000 });
        expect(run.stdout).toBe(`hello after a crash\n${hex(files.get('data/f03.bin')!)}  /data/f03.bin\n`);
      } finally {
        await pm.cleanup();
      }
    };
    await crashAndRecover('fuse-read', 'fuse-read:1', LAZY, readSome, { after });
  }, 240_000);

  it('between a chunk temp file write and its rename (the background pass writes chunks)', async () => {
    // chunks read lazily stay in memory while their compressed bytes are kept locally: chunk files
    // are written by the background pass
    await crashAndRecover('chunk-write', 'chunk-write:3', BACKGROUND, readSome, { leftTemp: 'cache/tmp' });
  }, 120_000);

  it('in the middle of a background unit (part of its chunks cached)', async () => {
    await crashAndRecover('background', 'background-unit:4', BACKGROUND, (diff) =>
      probe([{ op: 'stat', path: diff }]),
    );
  }, 120_000);

  it('between a resolution record temp write and its rename', async () => {
    await crashAndRecover(
      'record',
      'metadata-write:1:/metadata/layers/',
      LAZY,
      (diff) => probe([{ op: 'stat', path: diff }]),
      { leftTemp: 'metadata/layers' },
    );
  }, 120_000);

  it('between a layer state temp write and its rename (after the background DiffID check)', async () => {
    await crashAndRecover(
      'diffid',
      'metadata-write:1:/layer-state/',
      BACKGROUND,
      (diff) => probe([{ op: 'stat', path: diff }]),
      { leftTemp: 'layer-state' },
    );
  }, 120_000);
});
