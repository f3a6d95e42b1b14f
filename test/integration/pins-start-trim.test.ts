/**
 * Issue 14 known gap: the chunk cache enforces its bounds at start-up on what the last run left
 * (the "start-up trim"), and pins only re-register later, when the pin manager resumes them. A
 * pinned image's chunks, being the oldest, went first. With pins.json read before the cache opens
 * (store/pinned-chunks.ts, as the CLI's start-up does), the trim keeps every pinned chunk and
 * evicts only unpinned ones. A copy of the same root opened without it shows the gap.
 */
import { randomBytes } from 'node:crypto';
import { cp, mkdir, mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { waitForPins } from '../../src/cli/pin-command.js';
import { controlRequest } from '../../src/store/control-socket.js';
import { holdStartPins, pinnedChunksOnDisk } from '../../src/store/pinned-chunks.js';
import { rootLayout } from '../../src/util/root-layout.js';
import { probe } from '../helpers/fuse.js';
import { startMountedStore } from '../helpers/mounted-store.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { startServeCli, type ServeCli } from '../helpers/serve-cli.js';
import { TS_CLI } from '../helpers/cli-store.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, sha256 } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
/** `stargz-store serve` from the sources; resolves once it sent READY=1. */
async function startCli(dir: string, root: string, mnt: string, config: string): Promise<ServeCli> {
  const cfg = join(dir, `config-${Date.now()}.toml`);
  await writeFile(cfg, `[registry]\nregistries_conf = ""\n${config}`);
  return await startServeCli({
    cli: TS_CLI,
    config: cfg,
    root,
    addr: join(dir, 'store.sock'),
    mountpoint: mnt,
    notifySocket: join(dir, `notify-${Date.now()}.sock`),
  });
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

  /** One eStargz layer of `files` (f0.bin, f1.bin, ...) pushed as repo:tag: its ref and layer digest. */
  async function pushFiles(repo: string, tag: string, files: Buffer[]) {
    const img = assembleImage([
      await buildTestLayer(
        await makeTar(files.map((content, i) => ({ name: `f${i}.bin`, content }))),
        'estargz',
      ),
    ]);
    await pushImage(registry.url, repo, tag, img);
    return { ref: `${registry.host}/${repo}:${tag}`, digest: img.layers[0]!.descriptor.digest };
  }

  /** Two such images of random files of `kib` KiB each in `repo`: tags 'pinned' and 'other'. */
  async function pushPinnedAndOther(repo: string, kib: number[]) {
    const pinnedFiles = kib.map((k) => randomBytes(k * 1024));
    const otherFiles = kib.map((k) => randomBytes(k * 1024));
    const pinned = await pushFiles(repo, 'pinned', pinnedFiles);
    const other = await pushFiles(repo, 'other', otherFiles);
    return { pinned, pinnedFiles, other, otherFiles };
  }

  /** Every file of `image` read through the mount (another process) is the pushed bytes. */
  async function expectFilesRead(mnt: string, image: { ref: string; digest: string }, files: Buffer[]) {
    const diff = join(mnt, b64(image.ref), image.digest, 'diff');
    const read = await probe(files.map((_, i) => ({ op: 'sha256' as const, path: join(diff, `f${i}.bin`) })));
    expect(read).toEqual(files.map((f) => ({ sha256: sha256(f), length: f.length })));
  }

  /** Resolves once the store's status shows `image`'s layer verified. */
  async function layerVerified(sock: string, image: { ref: string; digest: string }): Promise<void> {
    for (;;) {
      const resp = await controlRequest(sock, { op: 'status' }, { timeoutMs: 10_000 });
      const rows = (resp.status as { layers: Array<{ ref: string; digest: string; verified: boolean }> })
        .layers;
      if (rows.some((r) => r.ref === image.ref && r.digest === image.digest && r.verified)) return;
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  /** Every chunk file under the root: hex -> path. */
  async function chunkFiles(root: string): Promise<Map<string, string>> {
    const base = rootLayout(root).chunks;
    const out = new Map<string, string>();
    for (const sub of await readdir(base).catch(() => [] as string[])) {
      for (const name of await readdir(join(base, sub))) out.set(name, join(base, sub, name));
    }
    return out;
  }

  /**
   * Make the pinned chunks the least recently used (pinned long ago, never read since): the
   * chunks that are not pinned and their bytes. Both sets hold more than one chunk.
   */
  async function agePinnedChunks(root: string, pinnedHexes: string[]) {
    const before = await chunkFiles(root);
    const unpinnedHexes = [...before.keys()].filter((h) => !pinnedHexes.includes(h));
    expect(pinnedHexes.length).toBeGreaterThan(1);
    expect(unpinnedHexes.length).toBeGreaterThan(1);
    const old = new Date('2020-01-01T00:00:00Z');
    for (const h of pinnedHexes) await utimes(before.get(h)!, old, old);
    let unpinnedBytes = 0;
    for (const h of unpinnedHexes) unpinnedBytes += (await stat(before.get(h)!)).size;
    return { unpinnedHexes, unpinnedBytes };
  }

  it('keeps every chunk pins.json pins; evicts only unpinned ones', async () => {
    const { pinned, other, otherFiles } = await pushPinnedAndOther('test/pintrim', [600, 400]);

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
      await expectFilesRead(mnt, other, otherFiles);
      await run.cache.flush();
    } finally {
      await run.stop();
    }
    const { unpinnedHexes, unpinnedBytes } = await agePinnedChunks(root, pinnedHexes);
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
    const { pinned, pinnedFiles, other, otherFiles } = await pushPinnedAndOther(
      'test/pintrim-cli',
      [500, 300],
    );
    const cdir = join(dir, 'cli');
    const root = join(cdir, 'root');
    const mnt = join(cdir, 'mnt');
    await mkdir(mnt, { recursive: true });

    // no quiet period: the other image's background pass writes its chunks to disk right away
    let cli = await startCli(cdir, root, mnt, '[background]\nquiet_ms = 0\n');
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
      await expectFilesRead(mnt, other, otherFiles);
      // chunks read lazily stay in memory (their compressed bytes are kept locally) until the
      // background pass writes them; it ends with the DiffID check (bounded by the test timeout)
      await layerVerified(join(cdir, 'store.sock'), other);
    } finally {
      expect(await cli.stop()).toEqual({ code: 0, signal: null });
    }
    const { unpinnedHexes, unpinnedBytes } = await agePinnedChunks(root, pinnedHexes);

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
      await expectFilesRead(mnt, pinned, pinnedFiles);
    } finally {
      expect(await cli.stop()).toEqual({ code: 0, signal: null });
    }
  }, 180_000);
});
