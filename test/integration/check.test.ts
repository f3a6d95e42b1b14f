import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { runCheck } from '../../src/cli/check-command.js';
import { checkStoreRoot, type StoreCheckResult } from '../../src/store/check.js';
import { startControlSocket } from '../../src/store/control-socket.js';
import { StoreSlot } from '../helpers/mounted-store.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { probe } from '../helpers/fuse.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, sha256 } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');

async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const ent of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (ent.isFile()) out.push(join(ent.parentPath, ent.name));
  }
  return out.sort();
}

async function flipByte(file: string, at = 0): Promise<void> {
  const b = await readFile(file);
  b[at] = b[at]! ^ 0xff;
  await writeFile(file, b);
}

async function check(root: string, repair = false): Promise<{ code: number; r: StoreCheckResult }> {
  const { code, output } = await runCheck({ root, repair, json: true });
  return { code, r: JSON.parse(output) as StoreCheckResult };
}

/**
 * `stargz-store check` on a root written by the real store (real registry, FUSE mount, reads from
 * another process): a flipped byte in a chunk, a damaged saved TOC and leftovers are named, --repair
 * removes them, and the store still serves correct bytes from a root with a bad chunk.
 */
describe('check (real registry, real FUSE mount)', () => {
  let registry: TestRegistry;
  let dir: string;
  let mnt: string;
  let root: string;
  const slot = new StoreSlot();
  const big = randomBytes(1 << 20);
  let diff = '';

  const start = async () => {
    await slot.start({
      root,
      mountpoint: mnt,
      requestTimeoutMs: 5000,
      layer: { backgroundFetch: false, prefetch: false },
    });
  };
  const stop = (): Promise<void> => slot.stop();

  beforeAll(async () => {
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-check-int-'));
    mnt = join(dir, 'store');
    root = join(dir, 'root');
    await mkdir(mnt);
    const img = assembleImage([
      await buildTestLayer(
        await makeTar([
          { name: 'app/', type: 'directory' },
          { name: 'app/big.bin', content: big },
        ]),
        'estargz',
      ),
    ]);
    await pushImage(registry.url, 'test/check', 'v1', img);
    diff = join(mnt, b64(`${registry.host}/test/check:v1`), img.layers[0]!.descriptor.digest, 'diff');
  });

  afterAll(async () => {
    await stop().catch(() => undefined);
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('names a flipped chunk byte, a bad saved TOC and leftovers; --repair removes them', async () => {
    await start();
    const r = await probe([{ op: 'sha256', path: join(diff, 'app', 'big.bin') }]);
    expect(r[0]).toEqual({ sha256: sha256(big), length: big.length });
    await stop();

    const clean = await check(root);
    expect(clean.code).toBe(0);
    expect(clean.r.problems).toEqual([]);
    expect(clean.r.counts.chunks).toBeGreaterThan(0);
    expect(clean.r.counts.records).toBe(1);
    expect(clean.r.counts.tocs).toBe(1);

    const chunks = await listFiles(join(root, 'cache', 'chunks'));
    const victim = chunks[0]!;
    await flipByte(victim, 10);
    const [tail] = await listFiles(join(root, 'metadata', 'tocs'));
    // a byte near the end: the footer/TOC region of the saved tail
    const tailBytes = await readFile(tail!);
    await flipByte(tail!, tailBytes.length - 60);
    await writeFile(join(root, 'cache', 'tmp', '123-dead-0'), 'partial');

    const bad = await check(root);
    expect(bad.code).toBe(1);
    const kinds = bad.r.problems.map((p) => [p.kind, p.path]);
    expect(kinds).toEqual(
      expect.arrayContaining([
        ['chunk-corrupt', victim],
        ['toc-invalid', tail],
        ['temp-file', join(root, 'cache', 'tmp', '123-dead-0')],
      ]),
    );
    expect(bad.r.problems).toHaveLength(3);
    expect(bad.r.problems.every((p) => !p.repaired)).toBe(true);
    const text = await runCheck({ root });
    expect(text.code).toBe(1);
    expect(text.output).toContain(`BAD  chunk-corrupt  ${victim}`);

    const repaired = await check(root, true);
    expect(repaired.code).toBe(0);
    expect(repaired.r.problems).toHaveLength(3);
    expect(repaired.r.problems.every((p) => p.repaired)).toBe(true);
    expect((await listFiles(join(root, 'cache', 'chunks'))).includes(victim)).toBe(false);

    const after = await check(root);
    expect(after.code).toBe(0);
    expect(after.r.problems).toEqual([]);
    expect(after.r.counts.chunks).toBe(chunks.length - 1);

    // The store refetches what was removed and serves correct bytes.
    await start();
    const again = await probe([{ op: 'sha256', path: join(diff, 'app', 'big.bin') }]);
    expect(again[0]).toEqual({ sha256: sha256(big), length: big.length });
    await stop();
  });

  it('a read through the mount never serves a cached chunk that fails its digest', async () => {
    const chunks = await listFiles(join(root, 'cache', 'chunks'));
    expect(chunks.length).toBeGreaterThan(0);
    for (const c of chunks) await flipByte(c, 0);
    await start();
    const r = await probe([{ op: 'sha256', path: join(diff, 'app', 'big.bin') }]);
    expect(r[0]).toEqual({ sha256: sha256(big), length: big.length });
    await stop();
    // the corrupt copies were dropped and replaced by verified ones
    const after = await check(root);
    expect(after.code).toBe(0);
  });

  it('check --addr: the running store checks its own root and repairs while serving', async () => {
    await start();
    const control = await startControlSocket(join(dir, 'ctl.sock'), {
      addCredentials: () => undefined,
      status: () => ({}),
      check: (repair) => checkStoreRoot(root, { repair, running: true, concurrency: 1 }),
    });
    try {
      const warm = await probe([{ op: 'sha256', path: join(diff, 'app', 'big.bin') }]);
      expect(warm[0]).toEqual({ sha256: sha256(big), length: big.length });
      const [victim] = await listFiles(join(root, 'cache', 'chunks'));
      await flipByte(victim!, 5);
      // a temp file of a live write is not a problem while the store runs
      await writeFile(join(root, 'cache', 'tmp', 'inflight-0'), 'x');

      const addr = join(dir, 'ctl.sock');
      const bad = await runCheck({ root: '/nonexistent', addr, json: true });
      expect(bad.code).toBe(1);
      const r = JSON.parse(bad.output) as StoreCheckResult;
      expect(r.problems.map((p) => [p.kind, p.path])).toEqual([['chunk-corrupt', victim]]);
      const fixed = await runCheck({ root: '/nonexistent', addr, repair: true });
      expect(fixed.code).toBe(0);
      expect(fixed.output).toContain(`REMOVED  chunk-corrupt  ${victim}`);
      expect((await runCheck({ root: '/nonexistent', addr })).code).toBe(0);

      slot.current!.cache.dropMemory();
      const again = await probe([{ op: 'sha256', path: join(diff, 'app', 'big.bin') }]);
      expect(again[0]).toEqual({ sha256: sha256(big), length: big.length });
    } finally {
      await control.close();
      await stop();
    }
  });
});
