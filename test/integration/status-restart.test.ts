/**
 * `status` tells the truth after a restart: a real `stargz-store` process fetches and verifies a
 * layer and records a use, is stopped, and started again on the same root; before anything looks
 * the layer up again, `status` shows it fetched, 100% and verified, with its use count.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlRequest } from '../../src/store/control-socket.js';
import { probe } from '../helpers/fuse.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { BIN_CLI, runCli, startServeCli, type ServeCli } from '../helpers/serve-cli.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, sha256 } from '../helpers/store.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const b64 = (s: string): string => Buffer.from(s).toString('base64');

interface Row {
  ref: string;
  digest: string;
  bytesFetched: number;
  totalBytes?: number;
  percent: number;
  verified: boolean;
  refs: number;
}

async function fuseMounted(path: string): Promise<boolean> {
  const text = await readFile('/proc/mounts', 'utf8');
  return text.split('\n').some((l) => l.split(' ')[1] === path);
}

describe('status after a store restart (real store process, real registry, FUSE)', () => {
  let registry: TestRegistry;
  let dir: string;
  let current: ServeCli | undefined;

  beforeAll(async () => {
    if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-status-restart-'));
  });

  afterAll(async () => {
    if (current && current.child.exitCode === null && current.child.signalCode === null) {
      current.child.kill('SIGKILL');
      await current.exited;
    }
    // a store killed above leaves its mount behind: lazy-unmount it before removing the tree
    if (dir && (await fuseMounted(mnt()))) {
      await new Promise((resolve) => execFile('fusermount', ['-uz', mnt()], () => resolve(undefined)));
    }
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const mnt = (): string => join(dir, 'mnt');
  const sock = (): string => join(dir, 's.sock');

  async function start(n: number): Promise<ServeCli> {
    return await startServeCli({
      cli: BIN_CLI,
      config: join(dir, 'config.toml'),
      root: join(dir, 'root'),
      addr: sock(),
      mountpoint: mnt(),
      notifySocket: join(dir, `notify-${n}.sock`),
      onSpawn: (p) => (current = p),
    });
  }

  async function stop(p: ServeCli): Promise<void> {
    p.child.kill('SIGTERM');
    expect(await p.exited).toEqual({ code: 0, signal: null });
    expect(await fuseMounted(mnt())).toBe(false);
  }

  async function rows(): Promise<Row[]> {
    const resp = await controlRequest(sock(), { op: 'status' }, { timeoutMs: 10_000 });
    return (resp.status as { layers: Row[] }).layers;
  }

  it('shows FETCHED, 100%, verified and REFS of a layer fetched before the restart', async () => {
    const payload = randomBytes(1 << 20);
    const img = assembleImage([
      await buildTestLayer(
        await makeTar([
          { name: 'app/', type: 'directory' },
          { name: 'app/a.txt', content: Buffer.from('hello\n') },
          { name: 'app/big.bin', content: payload },
        ]),
        'estargz',
      ),
    ]);
    await pushImage(registry.url, 'test/status-restart', 'v1', img);
    const ref = `${registry.host}/test/status-restart:v1`;
    const layer = img.layers[0]!;
    const digest = layer.descriptor.digest;
    await mkdir(mnt(), { recursive: true });
    // no quiet period: the background pass fetches and verifies the whole layer right away
    await writeFile(
      join(dir, 'config.toml'),
      '[registry]\nregistries_conf = ""\n[background]\nquiet_ms = 0\n[deadlines]\nlookup_sec = 10\nread_sec = 10\nfuse_sec = 20\n',
    );

    const first = await start(1);
    const layerDir = join(mnt(), b64(ref), digest);
    const r = await probe([
      { op: 'sha256', path: join(layerDir, 'diff', 'app', 'big.bin') },
      // Podman's use signal: answered ENOENT, counted
      { op: 'create', path: join(layerDir, 'use') },
    ]);
    expect(r[0]).toMatchObject({ sha256: sha256(payload) });
    expect(r[1]).toMatchObject({ errno: 'ENOENT' });
    // the background pass ends with the DiffID check: wait for it (bounded by the test timeout)
    let live: Row | undefined;
    for (;;) {
      live = (await rows()).find((x) => x.ref === ref && x.digest === digest);
      if (live?.verified === true) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    expect(live.refs).toBe(1);
    await stop(first);

    const second = await start(2);
    const after = (await rows()).find((x) => x.ref === ref && x.digest === digest);
    expect(after).toMatchObject({
      verified: true,
      percent: 100,
      bytesFetched: layer.blob.length,
      totalBytes: layer.blob.length,
      refs: 1,
    });
    // the operator's table says the same
    const table = await runCli(BIN_CLI, ['status', '--addr', sock()]);
    expect(table.stderr).toBe('');
    const line = table.stdout.split('\n').find((l) => l.includes('100.0%'));
    expect(line).toBeDefined();
    expect(line!.split(/\s{2,}/)).toEqual(expect.arrayContaining(['yes', '1', '100.0%']));
    await stop(second);
    current = undefined;
  });
});
