/**
 * Issue 14 known gap: the chunk cache enforces its bounds at start-up on what the last run left
 * (the "start-up trim"), and pins only re-register later, when the pin manager resumes them. A
 * pinned image's chunks, being the oldest, went first. With pins.json read before the cache opens
 * (store/pinned-chunks.ts, as the CLI's start-up does), the trim keeps every pinned chunk and
 * evicts only unpinned ones. A copy of the same root opened without it shows the gap.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cp, mkdir, mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { waitForPins } from '../../src/cli/pin-command.js';
import { controlRequest } from '../../src/store/control-socket.js';
import { holdStartPins, pinnedChunksOnDisk } from '../../src/store/pinned-chunks.js';
import { rootLayout } from '../../src/util/root-layout.js';
import { probe } from '../helpers/fuse.js';
import { startMountedStore } from '../helpers/mounted-store.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { startNotifyListener } from '../helpers/sd-notify-listener.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, sha256 } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const TS_LOADER = fileURLToPath(new URL('./engine-ts-loader.mjs', import.meta.url));
const CLI_MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

interface Cli {
  child: ChildProcess;
  /** Resolves when a stderr (log) line contains `text`. */
  logged(text: string): Promise<void>;
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** `stargz-store serve` from the sources; resolves once it sent READY=1. */
async function startCli(dir: string, root: string, mnt: string, config: string): Promise<Cli> {
  const cfg = join(dir, `config-${Date.now()}.toml`);
  await writeFile(cfg, `[registry]\nregistries_conf = ""\n${config}`);
  const listener = await startNotifyListener(join(dir, `notify-${Date.now()}.sock`));
  const child = spawn(
    process.execPath,
    [
      '--import',
      TS_LOADER,
      CLI_MAIN,
      '--config',
      cfg,
      '--root',
      root,
      '--addr',
      join(dir, 'store.sock'),
      mnt,
    ],
    { env: { ...process.env, NOTIFY_SOCKET: listener.socket }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let err = '';
  const waiters: Array<{ text: string; resolve: () => void }> = [];
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
    for (const w of waiters.splice(0)) {
      if (err.includes(w.text)) w.resolve();
      else waiters.push(w);
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.once('exit', (code, signal) => r({ code, signal })),
  );
  try {
    await Promise.race([
      listener.waitFor('READY=1', 60_000),
      exited.then((e) =>
        Promise.reject(new Error(`store exited before READY=1: ${JSON.stringify(e)}\n${err}`)),
      ),
    ]);
  } finally {
    await listener.close();
  }
  return {
    child,
    logged: (text) =>
      err.includes(text)
        ? Promise.resolve()
        : Promise.race([
            new Promise<void>((resolve) => waiters.push({ text, resolve })),
            exited.then((e) => Promise.reject(new Error(`store exited: ${JSON.stringify(e)}\n${err}`))),
          ]),
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM'); // our child
      return await exited;
    },
  };
}

describe('pinned chunks and the cache start-up trim', () => {
  let registry: TestRegistry;
  let dir: string;

  beforeAll(async () => {
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-pin-trim-'));
  });

  afterAll(async () => {
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Every chunk file under the root: hex -> path. */
  async function chunkFiles(root: string): Promise<Map<string, string>> {
    const base = rootLayout(root).chunks;
    const out = new Map<string, string>();
    for (const sub of await readdir(base).catch(() => [] as string[])) {
      for (const name of await readdir(join(base, sub))) out.set(name, join(base, sub, name));
    }
    return out;
  }

  it('keeps every chunk pins.json pins; evicts only unpinned ones', async () => {
    const pinnedFiles = [randomBytes(600 * 1024), randomBytes(400 * 1024)];
    const otherFiles = [randomBytes(600 * 1024), randomBytes(400 * 1024)];
    const image = async (tag: string, files: Buffer[]) => {
      const img = assembleImage([
        await buildTestLayer(
          await makeTar(files.map((content, i) => ({ name: `f${i}.bin`, content }))),
          'estargz',
        ),
      ]);
      await pushImage(registry.url, 'test/pintrim', tag, img);
      return { ref: `${registry.host}/test/pintrim:${tag}`, digest: img.layers[0]!.descriptor.digest };
    };
    const pinned = await image('pinned', pinnedFiles);
    const other = await image('other', otherFiles);

    // a run: pin one image (fetched whole, verified), read the other one lazily
    const root = join(dir, 'root');
    const mnt = join(dir, 'mnt');
    await mkdir(mnt, { recursive: true });
    const run = await startMountedStore({
      root,
      mountpoint: mnt,
      controlSocket: join(dir, 'store.sock'),
      layer: { backgroundFetch: true, prefetch: false, stateDir: rootLayout(root).layerState },
    });
    let pinnedHexes: string[];
    try {
      await run.pins!.add([pinned.ref]);
      await run.pins!.idle();
      expect(run.pins!.list().map((p) => p.state)).toEqual(['pinned']);
      await run.cache.flush();
      pinnedHexes = [...(await chunkFiles(root)).keys()];
      const diff = join(mnt, b64(other.ref), other.digest, 'diff');
      const read = await probe(
        otherFiles.map((_, i) => ({ op: 'sha256' as const, path: join(diff, `f${i}.bin`) })),
      );
      expect(read).toEqual(otherFiles.map((f) => ({ sha256: sha256(f), length: f.length })));
      await run.cache.flush();
    } finally {
      await run.stop();
    }
    const before = await chunkFiles(root);
    const unpinnedHexes = [...before.keys()].filter((h) => !pinnedHexes.includes(h));
    expect(pinnedHexes.length).toBeGreaterThan(1);
    expect(unpinnedHexes.length).toBeGreaterThan(1);
    // the pinned chunks are the least recently used (pinned long ago, never read since)
    const old = new Date('2020-01-01T00:00:00Z');
    for (const h of pinnedHexes) await utimes(before.get(h)!, old, old);
    let unpinnedBytes = 0;
    for (const h of unpinnedHexes) unpinnedBytes += (await stat(before.get(h)!)).size;
    const control = join(dir, 'control');
    await cp(root, control, { recursive: true });

    // the next start with a smaller cache bound: what the CLI start-up does
    const maxBytes = Math.floor(unpinnedBytes / 2);
    const digests = await pinnedChunksOnDisk(root);
    expect(digests.map((d) => d.slice('sha256:'.length)).sort()).toEqual([...pinnedHexes].sort());
    const cache = await ChunkCache.open({ root, maxBytes, minFreeBytes: 0 });
    const release = holdStartPins(cache, digests);
    await cache.whenScanned();
    await cache.flush();
    const after = await chunkFiles(root);
    for (const h of pinnedHexes) expect(after.has(h), `pinned chunk ${h} kept`).toBe(true);
    // the trim did run: unpinned chunks went until the bound was met (pins may exceed it)
    expect(unpinnedHexes.filter((h) => after.has(h)).length).toBeLessThan(unpinnedHexes.length);
    release();
    await cache.close();

    // the same start without reading pins.json first: the trim takes the pinned chunks first
    const bare = await ChunkCache.open({ root: control, maxBytes, minFreeBytes: 0 });
    await bare.whenScanned();
    await bare.flush();
    const bareAfter = await chunkFiles(control);
    expect(pinnedHexes.filter((h) => !bareAfter.has(h)).length).toBeGreaterThan(0);
    await bare.close();
  }, 120_000);

  it('the real CLI start-up: after a restart with a smaller cache bound, the pinned image is whole', async () => {
    const pinnedFiles = [randomBytes(500 * 1024), randomBytes(300 * 1024)];
    const otherFiles = [randomBytes(500 * 1024), randomBytes(300 * 1024)];
    const push = async (tag: string, files: Buffer[]) => {
      const img = assembleImage([
        await buildTestLayer(
          await makeTar(files.map((content, i) => ({ name: `f${i}.bin`, content }))),
          'estargz',
        ),
      ]);
      await pushImage(registry.url, 'test/pintrim-cli', tag, img);
      return { ref: `${registry.host}/test/pintrim-cli:${tag}`, digest: img.layers[0]!.descriptor.digest };
    };
    const pinned = await push('pinned', pinnedFiles);
    const other = await push('other', otherFiles);
    const cdir = join(dir, 'cli');
    const root = join(cdir, 'root');
    const mnt = join(cdir, 'mnt');
    await mkdir(mnt, { recursive: true });

    let cli = await startCli(cdir, root, mnt, '');
    let pinnedHexes: string[];
    try {
      await controlRequest(
        join(cdir, 'store.sock'),
        { op: 'pinAdd', refs: [pinned.ref] },
        { timeoutMs: 60_000 },
      );
      const done = await waitForPins(join(cdir, 'store.sock'), [pinned.ref], () => undefined, 50);
      expect(done.map((p) => p.state)).toEqual(['pinned']);
      pinnedHexes = [...(await chunkFiles(root)).keys()];
      const diff = join(mnt, b64(other.ref), other.digest, 'diff');
      const read = await probe(
        otherFiles.map((_, i) => ({ op: 'sha256' as const, path: join(diff, `f${i}.bin`) })),
      );
      expect(read).toEqual(otherFiles.map((f) => ({ sha256: sha256(f), length: f.length })));
    } finally {
      expect(await cli.stop()).toEqual({ code: 0, signal: null });
    }
    const before = await chunkFiles(root);
    const unpinnedHexes = [...before.keys()].filter((h) => !pinnedHexes.includes(h));
    expect(pinnedHexes.length).toBeGreaterThan(1);
    expect(unpinnedHexes.length).toBeGreaterThan(1);
    const old = new Date('2020-01-01T00:00:00Z');
    for (const h of pinnedHexes) await utimes(before.get(h)!, old, old);
    let unpinnedBytes = 0;
    for (const h of unpinnedHexes) unpinnedBytes += (await stat(before.get(h)!)).size;

    // restart with a bound the cache exceeds: the start-up trim runs before the pins resume
    await registry.stop();
    cli = await startCli(
      cdir,
      root,
      mnt,
      `[cache]\nmax_bytes = ${Math.floor(unpinnedBytes / 2)}\nmin_free_bytes = 0\n`,
    );
    try {
      await cli.logged('chunk cache index ready');
      const after = await chunkFiles(root);
      for (const h of pinnedHexes) expect(after.has(h), `pinned chunk ${h} kept`).toBe(true);
      expect(unpinnedHexes.filter((h) => after.has(h)).length).toBeLessThan(unpinnedHexes.length);
      // registry gone: the pinned image is served whole from the cache
      const diff = join(mnt, b64(pinned.ref), pinned.digest, 'diff');
      const read = await probe(
        pinnedFiles.map((_, i) => ({ op: 'sha256' as const, path: join(diff, `f${i}.bin`) })),
      );
      expect(read).toEqual(pinnedFiles.map((f) => ({ sha256: sha256(f), length: f.length })));
    } finally {
      expect(await cli.stop()).toEqual({ code: 0, signal: null });
    }
  }, 180_000);
});
