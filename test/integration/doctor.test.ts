import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { runDoctor } from '../../src/cli/doctor-command.js';
import type { DoctorReport } from '../../src/cli/doctor.js';
import { startCliStore } from '../helpers/cli-store.js';
import { doctorArgs, serveArgs } from '../helpers/serve-cli.js';
import { freePort, startRegistry, type TestRegistry } from '../helpers/registry.js';
import { assembleImage, buildTestLayer, makeTar, pushImage } from '../helpers/store.js';

const REPO = resolve(import.meta.dirname, '../..');
const CLI = join(REPO, 'bin/stargz-store.js');

function exec(cmd: string, args: string[]): Promise<void> {
  return new Promise((res) => execFile(cmd, args, () => res()));
}

function cli(args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((res) =>
    execFile(process.execPath, [CLI, ...args], (err, stdout) =>
      res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: String(stdout) }),
    ),
  );
}

/**
 * `stargz-store doctor` against the real CLI store process: healthy set-up (with --ref on a real
 * registry holding one lazy and one plain gzip layer) exits 0; after the store is killed (a dead
 * FUSE mount), it exits 1 and the JSON names the dead mount.
 */
describe('doctor (real store process, real registry)', () => {
  let registry: TestRegistry;
  let dir: string;
  let mnt: string;
  let sock: string;
  let root: string;
  let storageConf: string;
  let config: string;
  let child: ChildProcess | undefined;
  let ref = '';

  beforeAll(async () => {
    if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-doctor-int-'));
    mnt = join(dir, 'store');
    sock = join(dir, 'store.sock');
    root = join(dir, 'root');
    storageConf = join(dir, 'storage.conf');
    config = join(dir, 'config.toml');
    await mkdir(mnt);
    await writeFile(
      storageConf,
      `[storage]\ndriver = "overlay"\n[storage.options]\nadditionallayerstores = ["${mnt}:ref"]\n`,
    );
    await writeFile(config, '[cache]\nmin_free_bytes = 0\n');
    const tar = await makeTar([{ name: 'a.bin', content: randomBytes(64 * 1024) }]);
    const img = assembleImage([await buildTestLayer(tar, 'estargz'), await buildTestLayer(tar, 'gzip')]);
    await pushImage(registry.url, 'test/doctor', 'v1', img);
    ref = `${registry.host}/test/doctor:v1`;
  });

  afterAll(async () => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await exec('fusermount', ['-uz', mnt]);
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const doctor = async (withRef: boolean) => {
    const { code, output } = await runDoctor({
      mountpoint: mnt,
      addr: sock,
      root,
      config,
      storageConf,
      json: true,
      ...(withRef ? { ref } : {}),
    });
    return { code, r: JSON.parse(output) as DoctorReport };
  };

  it('passes on a healthy set-up and names the dead mount once the store is killed', async () => {
    const metricsAddr = `127.0.0.1:${await freePort()}`;
    const store = await startCliStore(
      [
        CLI,
        ...serveArgs({ config, root, addr: sock }),
        '--log-level',
        'warn',
        '--metrics-address',
        metricsAddr,
        mnt,
      ],
      sock,
    );
    child = store.child;
    const exited = store.exited;

    // the CLI's own wiring: --metrics-address serves /metrics, pin list answers on the socket
    const metrics = await fetch(`http://${metricsAddr}/metrics`).then((r) => r.text());
    expect(metrics).toContain('stargz_store_pinned_images{state="pinned"} 0');
    expect(metrics).toContain('# TYPE stargz_store_fuse_operation_duration_seconds histogram');
    const pins = await cli(['pin', 'list', '--json', '--addr', sock]);
    expect(pins.code).toBe(0);
    expect(JSON.parse(pins.out)).toEqual([]);

    const healthy = await doctor(true);
    const byId = Object.fromEntries(healthy.r.checks.map((c) => [c.id, c]));
    expect(healthy.r.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(healthy.code).toBe(0);
    expect(healthy.r.ok).toBe(true);
    expect(byId.mount?.status).toBe('pass');
    expect(byId['control-socket']?.message).toContain(`pid ${child.pid}`);
    expect(byId['storage-conf']?.message).toContain(`${mnt}:ref`);
    expect(byId.range?.message).toContain('honours Range');
    expect(byId['layer-0']).toMatchObject({ status: 'pass' });
    expect(byId['layer-0']?.message).toContain('lazy (estargz');
    expect(byId['layer-1']).toMatchObject({ status: 'warn' });
    expect(byId['layer-1']?.message).toContain('not lazy');
    expect(byId['layer-1']?.message).toContain('convert it');
    for (const c of healthy.r.checks) {
      expect(Object.keys(c).sort()).toEqual(
        c.fix === undefined ? ['id', 'message', 'status'] : ['fix', 'id', 'message', 'status'],
      );
    }

    child.kill('SIGKILL');
    await exited;
    const dead = await doctor(false);
    // the CLI exit code too
    const deadCli = await cli(doctorArgs({ mountpoint: mnt, addr: sock, root, config, storageConf }));
    expect(deadCli.code).toBe(1);
    expect((JSON.parse(deadCli.out) as DoctorReport).checks.find((c) => c.id === 'mount')?.status).toBe(
      'fail',
    );
    expect(dead.code).toBe(1);
    expect(dead.r.ok).toBe(false);
    const mount = dead.r.checks.find((c) => c.id === 'mount');
    expect(mount?.status).toBe('fail');
    expect(mount?.message).toContain(mnt);
    expect(mount?.message).toContain('ENOTCONN');
    expect(mount?.fix).toContain(`umount -l ${mnt}`);
    expect(dead.r.checks.find((c) => c.id === 'control-socket')?.status).toBe('fail');
  });
});
