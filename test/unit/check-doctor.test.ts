import { describe, expect, it } from 'vitest';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkStoreRoot } from '../../src/store/check.js';
import { runDoctorChecks } from '../../src/cli/doctor.js';

async function withDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'sgz-ops-unit-'));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const HEX = 'ab'.repeat(32);

describe('check: leftovers and metadata', () => {
  it('names stray files, orphan TOCs, bad layer states and a damaged pins.json; --repair removes them', async () => {
    await withDir(async (root) => {
      await mkdir(join(root, 'cache', 'chunks', 'sha256', 'zz'), { recursive: true });
      await mkdir(join(root, 'cache', 'chunks', 'sha256', 'ab'), { recursive: true });
      await writeFile(join(root, 'cache', 'chunks', 'sha256', 'ab', 'not-a-chunk'), 'x');
      await mkdir(join(root, 'metadata', 'tocs'), { recursive: true });
      await writeFile(join(root, 'metadata', 'tocs', `${HEX}.tail`), '{"version":1}\n');
      await mkdir(join(root, 'layer-state'), { recursive: true });
      await writeFile(join(root, 'layer-state', 'x.json'), '{"layerKey":"x"}');
      await writeFile(join(root, 'layer-state', 'y.json.1a2b.tmp'), '{}');
      await writeFile(join(root, 'pins.json'), '{"pins":');

      const r = await checkStoreRoot(root, { repair: false });
      expect(r.clean).toBe(false);
      expect(r.problems.map((p) => p.kind).sort()).toEqual([
        'layer-state-invalid',
        'pin-invalid',
        'stray-file',
        'stray-file',
        'temp-file',
        'toc-orphan',
      ]);
      expect(r.problems.find((p) => p.kind === 'toc-orphan')?.detail).toContain(`sha256:${HEX}`);

      // a running store skips temp files (they may be writes in flight)
      const live = await checkStoreRoot(root, { repair: false, running: true });
      expect(live.problems.some((p) => p.kind === 'temp-file')).toBe(false);

      const fixed = await checkStoreRoot(root, { repair: true });
      expect(fixed.clean).toBe(true);
      expect(fixed.problems.every((p) => p.repaired)).toBe(true);
      expect((await checkStoreRoot(root, { repair: false })).problems).toEqual([]);
      expect(await readdir(join(root, 'layer-state'))).toEqual([]);
    });
  });
});

describe('doctor: storage.conf', () => {
  const run = (dir: string, conf: string) =>
    writeFile(join(dir, 'storage.conf'), conf).then(() =>
      runDoctorChecks({
        mountpoint: '/var/lib/stargz-store/store',
        addr: join(dir, 'none.sock'),
        root: dir,
        config: join(dir, 'config.toml'),
        storageConf: join(dir, 'storage.conf'),
      }),
    );

  it('passes with :ref, fails without it or when absent, and names the fix', async () => {
    await withDir(async (dir) => {
      await writeFile(join(dir, 'config.toml'), '');
      const ok = await run(
        dir,
        '[storage.options]\nadditionallayerstores = ["/other:ref", "/var/lib/stargz-store/store/:ref"]\n',
      );
      expect(ok.checks.find((c) => c.id === 'storage-conf')?.status).toBe('pass');
      // the store is not running here: the report fails on the mount and socket, naming them
      expect(ok.ok).toBe(false);
      expect(ok.checks.find((c) => c.id === 'mount')?.status).toBe('fail');
      expect(ok.checks.find((c) => c.id === 'control-socket')?.message).toContain('not running');

      const noRef = await run(
        dir,
        '[storage.options]\nadditionallayerstores = ["/var/lib/stargz-store/store"]\n',
      );
      const c = noRef.checks.find((x) => x.id === 'storage-conf')!;
      expect(c.status).toBe('fail');
      expect(c.message).toContain('without :ref');
      expect(c.fix).toBe('change it to "/var/lib/stargz-store/store:ref"');

      const none = await run(dir, '[storage]\ndriver = "overlay"\n');
      const n = none.checks.find((x) => x.id === 'storage-conf')!;
      expect(n.status).toBe('fail');
      expect(n.fix).toContain('add "/var/lib/stargz-store/store:ref" to additionallayerstores');
    });
  });

  it('a bad config file is a failed check naming the key', async () => {
    await withDir(async (dir) => {
      await writeFile(join(dir, 'config.toml'), 'max_concurrency = "x"\n');
      const r = await run(dir, '');
      const c = r.checks.find((x) => x.id === 'config')!;
      expect(c.status).toBe('fail');
      expect(c.message).toContain('max_concurrency');
    });
  });

  it('names the credential source for --ref, never the secret', async () => {
    await withDir(async (dir) => {
      const auth = join(dir, 'auth.json');
      const secret = 's3cret-Pa55';
      const b64 = Buffer.from(`user:${secret}`).toString('base64');
      await writeFile(auth, JSON.stringify({ auths: { '127.0.0.1:1': { auth: b64 } } }));
      await writeFile(join(dir, 'config.toml'), `[registry]\nauth_file = "${auth}"\n`);
      await writeFile(join(dir, 'storage.conf'), '');
      const r = await runDoctorChecks({
        mountpoint: '/var/lib/stargz-store/store',
        addr: join(dir, 'none.sock'),
        root: dir,
        config: join(dir, 'config.toml'),
        storageConf: join(dir, 'storage.conf'),
        ref: '127.0.0.1:1/x/y:z',
        timeoutMs: 2000,
      });
      const creds = r.checks.find((c) => c.id === 'credentials')!;
      expect(creds).toMatchObject({ status: 'pass', message: `credentials for 127.0.0.1:1 from ${auth}` });
      expect(r.checks.find((c) => c.id === 'registry')?.status).toBe('fail');
      const text = JSON.stringify(r);
      expect(text).not.toContain(secret);
      expect(text).not.toContain(b64);
    });
  });
});
