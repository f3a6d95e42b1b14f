import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, mkdir, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { controlRequest } from '../../src/store/control-socket.js';
import type { PinStatus } from '../../src/store/pins.js';
import { waitForPins } from '../../src/cli/pin-command.js';
import { StoreSlot } from '../helpers/mounted-store.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { probe } from '../helpers/fuse.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, sha256 } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');

function run(cmd: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, (err, _o, stderr) => (err ? reject(new Error(`${cmd}: ${stderr}`)) : resolve())),
  );
}

/**
 * Pinned images with the real parts: pinned through the control socket from a docker-registry,
 * then the registry is stopped and the store restarted: the pin resumes from pins.json and every
 * file is served through the FUSE mount. Unpinning makes the chunks evictable. A pin that does
 * not fit a small tmpfs is refused with nothing written.
 */
describe('pins (real registry, real FUSE mount)', () => {
  let registry: TestRegistry;
  let dir: string;
  let mnt: string;
  const slot = new StoreSlot();
  const files = [randomBytes(700 * 1024), randomBytes(300 * 1024), Buffer.from('small\n')];
  let img: ReturnType<typeof assembleImage>;
  let ref = '';

  const start = async (root: string, sock: string, mountAt = mnt) => {
    return await slot.start({
      root,
      mountpoint: mountAt,
      controlSocket: sock,
      deadlines: { lookupMs: 3000, readMs: 3000, syntheticMs: 1000 },
      layer: { backgroundFetch: true, prefetch: false, stateDir: join(root, 'layer-state') },
    });
  };
  const stop = (): Promise<void> => slot.stop();

  beforeAll(async () => {
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-pins-int-'));
    mnt = join(dir, 'store');
    await mkdir(mnt);
    img = assembleImage([
      await buildTestLayer(
        await makeTar([
          { name: 'app/', type: 'directory' },
          { name: 'app/a.bin', content: files[0]! },
          { name: 'app/b.bin', content: files[1]! },
        ]),
        'estargz',
      ),
      await buildTestLayer(await makeTar([{ name: 'etc/small.txt', content: files[2]! }]), 'zstd:chunked'),
      await buildTestLayer(await makeTar([{ name: 'plain.txt', content: 'plain gzip\n' }]), 'gzip'),
    ]);
    await pushImage(registry.url, 'test/pins', 'v1', img);
    ref = `${registry.host}/test/pins:v1`;
  });

  afterAll(async () => {
    await stop().catch(() => undefined);
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('pins, serves after a registry-less restart, and unpins', async () => {
    const root = join(dir, 'root');
    const sock = join(dir, 'store.sock');
    let r = await start(root, sock);
    const added = await controlRequest(sock, { op: 'pinAdd', refs: [ref] }, { timeoutMs: 60_000 });
    expect((added.pins as PinStatus[])[0]?.state).toMatch(/pending|fetching/);
    const done = await waitForPins(sock, [ref], () => undefined, 50);
    expect(done[0]?.error).toBeUndefined();
    expect(done[0]?.state).toBe('pinned');
    expect(done[0]?.percent).toBe(100);
    const listed = (await controlRequest(sock, { op: 'pinList' })).pins as PinStatus[];
    expect(listed.map((p) => [p.ref, p.state])).toEqual([[ref, 'pinned']]);
    const gz = listed[0]!.layers[2]!;
    expect(gz).toMatchObject({ lazy: false });
    expect(gz.reason).toContain('convert it');
    for (const l of img.layers.slice(0, 2)) expect(r.cache.isPinned(l.descriptor.digest)).toBe(true);
    await stop();

    // registry gone: the restarted store resumes the pin from pins.json and serves every file
    await registry.stop();
    r = await start(root, sock);
    const again = await waitForPins(sock, [ref], () => undefined, 50);
    expect(again[0]?.error).toBeUndefined();
    expect(again[0]?.state).toBe('pinned');
    const d0 = join(mnt, b64(ref), img.layers[0]!.descriptor.digest, 'diff');
    const d1 = join(mnt, b64(ref), img.layers[1]!.descriptor.digest, 'diff');
    const read = await probe([
      { op: 'sha256', path: join(d0, 'app', 'a.bin') },
      { op: 'sha256', path: join(d0, 'app', 'b.bin') },
      { op: 'sha256', path: join(d1, 'etc', 'small.txt') },
    ]);
    expect(read).toEqual(files.map((f) => ({ sha256: sha256(f), length: f.length })));

    await controlRequest(sock, { op: 'pinRm', refs: [ref] });
    expect((await controlRequest(sock, { op: 'pinList' })).pins).toEqual([]);
    for (const l of img.layers.slice(0, 2)) expect(r.cache.isPinned(l.descriptor.digest)).toBe(false);
    await expect(controlRequest(sock, { op: 'pinRm', refs: [ref] })).rejects.toThrow(/not pinned/);
    await stop();
  });

  it('refuses a pin that does not fit the cache filesystem, writing nothing', async () => {
    // a fresh registry (the first test stopped its own): same image, pushed again
    registry = await startRegistry();
    await pushImage(registry.url, 'test/pins', 'v1', img);
    ref = `${registry.host}/test/pins:v1`;
    const small = join(dir, 'small');
    await mkdir(small);
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', small]);
    try {
      const root = join(small, 'root');
      const sock = join(dir, 'small.sock');
      const mnt2 = join(dir, 'store2');
      await mkdir(mnt2);
      await start(root, sock, mnt2);
      await expect(
        controlRequest(sock, { op: 'pinAdd', refs: [ref] }, { timeoutMs: 60_000 }),
      ).rejects.toThrow(
        /not enough free space to pin .*test\/pins:v1: .* free, .* needed \(twice the .* still to fetch/,
      );
      expect((await controlRequest(sock, { op: 'pinList' })).pins).toEqual([]);
      await stop();
      expect(existsSync(join(root, 'pins.json'))).toBe(false);
      expect(await readdir(join(root, 'cache', 'chunks', 'sha256'))).toEqual([]);
    } finally {
      await stop().catch(() => undefined);
      await run('umount', [small]).catch(() => undefined);
    }
  });
});
