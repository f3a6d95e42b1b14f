import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { access, constants, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlSocket, type CredentialMap } from '../../src/store/control-socket.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(
  cmd: string,
  args: string[],
  opts: { stdin?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: REPO,
      env: opts.env ?? process.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    // a command that exits without reading its input must not fail the run with EPIPE
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.stdin ?? '');
  });
}

async function listTree(dir: string, skip: (rel: string) => boolean): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const rel = relative(dir, p);
      if (skip(rel)) continue;
      out.push(rel);
      if (e.isDirectory()) await walk(p);
    }
  };
  await walk(dir);
  return out.sort();
}

describe('scripts/install.sh into a temporary prefix', () => {
  let tmp: string;
  let prefix: string;
  let first: Run;

  beforeAll(async () => {
    if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
    tmp = await mkdtemp(join(tmpdir(), 'install-'));
    prefix = join(tmp, 'usr');
    first = await run('bash', ['scripts/install.sh', '--prefix', prefix, '--no-build']);
  }, 180_000);
  afterAll(async () => {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it('installs the program, wrappers, unit, config and snippets', async () => {
    expect(first.stderr).not.toMatch(/error/i);
    expect(first.code).toBe(0);
    for (const w of ['stargz-store', 'stargz-store-helper']) {
      await access(join(prefix, 'bin', w), constants.X_OK);
      const text = await readFile(join(prefix, 'bin', w), 'utf8');
      expect(text).toContain(join(prefix, 'lib/stargz-store/bin'));
    }
    expect(existsSync(join(prefix, 'lib/stargz-store/dist/src/cli/main.js'))).toBe(true);
    const conf = join(prefix, 'etc/stargz-store/config.toml');
    expect(await readFile(conf, 'utf8')).toBe(await readFile(join(REPO, 'systemd/config.toml'), 'utf8'));
    for (const f of ['storage.conf.snippet', 'registries.conf.snippet', 'config.toml']) {
      expect(existsSync(join(prefix, 'share/stargz-store', f))).toBe(true);
    }
  });

  it('rewrites the unit for the prefix and keeps the Go unit semantics', async () => {
    const unit = await readFile(join(prefix, 'etc/systemd/system/stargz-store.service'), 'utf8');
    expect(unit).toMatch(/^Type=notify$/m);
    expect(unit).toMatch(/^Before=crio\.service$/m);
    expect(unit).toMatch(/^After=network-online\.target$/m);
    expect(unit).toMatch(/^Restart=always$/m);
    expect(unit).toMatch(/^KillSignal=SIGTERM$/m);
    expect(unit).toMatch(/^NotifyAccess=all$/m);
    const state = `${prefix}/var/lib/stargz-store`;
    expect(unit).toContain(`ExecStopPost=-/bin/umount ${state}/store\n`);
    expect(unit).toContain(
      `ExecStart=${prefix}/bin/stargz-store --log-level=info --config=${prefix}/etc/stargz-store/config.toml --root=${state} --addr=${state}/store.sock ${state}/store\n`,
    );
    // Every path moved: nothing still names the default state directory.
    expect(unit.replaceAll(state, '<state>')).not.toContain('/var/lib/stargz-store');
    expect(first.stderr).toContain(
      `unit ${prefix}/etc/systemd/system/stargz-store.service (mountpoint ${state}/store, root ${state}, socket ${state}/store.sock)`,
    );
    const snippet = await readFile(join(prefix, 'share/stargz-store/storage.conf.snippet'), 'utf8');
    expect(snippet).toContain(`additionallayerstores = ["${state}/store:ref"]`);
    // c/image runs the helper without arguments: the wrapper supplies this install's socket.
    expect(await readFile(join(prefix, 'bin/stargz-store-helper'), 'utf8')).toContain(
      `set -- "${state}/store.sock"`,
    );
    // The repository copy keeps the standard locations.
    const shipped = await readFile(join(REPO, 'systemd/stargz-store.service'), 'utf8');
    expect(shipped).toContain(
      'ExecStart=/usr/local/bin/stargz-store --log-level=info --config=/etc/stargz-store/config.toml --root=/var/lib/stargz-store --addr=/var/lib/stargz-store/store.sock /var/lib/stargz-store/store',
    );
  });

  it('starts nothing without systemd and says so', () => {
    if (existsSync('/run/systemd/system')) {
      // systemd is running here: the unit went to a private directory, so nothing is reloaded either.
      expect(first.stderr).not.toMatch(/systemctl enable --now/);
    } else {
      expect(first.stderr).toMatch(/systemd is not running; nothing started/);
    }
  });

  it('ships production dependencies only', async () => {
    const nm = join(prefix, 'lib/stargz-store/node_modules');
    for (const dep of [
      'commander',
      'pino',
      'smol-toml',
      'undici',
      'fuse-native',
      'zstd-napi',
      `node-linux-${process.arch}`,
    ]) {
      expect(existsSync(join(nm, dep, 'package.json'))).toBe(true);
    }
    for (const dev of ['typescript', 'vitest', 'eslint', 'prettier', 'fast-check', 'tar-stream']) {
      expect(existsSync(join(nm, dev))).toBe(false);
    }
  });

  it('the installed wrapper runs the bundled Node 24, whatever node is first on PATH', async () => {
    const text = await readFile(join(prefix, 'bin/stargz-store'), 'utf8');
    expect(text).toContain(join(prefix, 'lib/stargz-store/node_modules/node-linux-'));
    // and with the V8 options bin/stargz-store uses (bin/node-options)
    expect(text).toContain('--max-semi-space-size=');
    const r = await run(join(prefix, 'bin/stargz-store'), ['--version'], {
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
    });
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toMatch(/^stargz-store \d+\.\d+\.\d+\S* \(node v24\.\d+\.\d+\)$/);
    expect(first.stderr).toMatch(/\(node v24\.\d+\.\d+\)/);
  });

  it('the installed commands run: config errors name the key, the helper reaches a store', async () => {
    const bad = join(tmp, 'bad.toml');
    await writeFile(bad, '[blob]\nchunk_size = -3\n');
    const r = await run(join(prefix, 'bin/stargz-store'), [
      '--config',
      bad,
      '--root',
      join(tmp, 'root'),
      join(tmp, 'mnt'),
    ]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('config key [blob] chunk_size: must be a positive integer, got -3');

    const received: CredentialMap[] = [];
    const sock = join(tmp, 's.sock');
    const server = await startControlSocket(sock, {
      addCredentials: (m) => void received.push(m),
      status: () => [],
    });
    try {
      const h = await run(join(prefix, 'bin/stargz-store-helper'), [sock], {
        stdin: '{"127.0.0.1:5000/x:1":{"username":"u","password":"p"}}',
      });
      expect(h.stderr).toBe('');
      expect(h.code).toBe(0);
      expect(received).toEqual([{ '127.0.0.1:5000/x:1': { username: 'u', password: 'p' } }]);
    } finally {
      await server.close();
    }
  });

  it('is idempotent: a second run replaces the program and keeps an edited config', async () => {
    const skip = (rel: string): boolean => rel.startsWith('lib/stargz-store/node_modules/');
    const before = await listTree(prefix, skip);
    const conf = join(prefix, 'etc/stargz-store/config.toml');
    await writeFile(conf, '# edited by the operator\n[blob]\nchunk_size = 100000\n');
    const marker = join(prefix, 'lib/stargz-store/stale-file');
    await writeFile(marker, 'from an older version');

    const second = await run('bash', ['scripts/install.sh', '--prefix', prefix, '--no-build']);
    expect(second.code).toBe(0);
    expect(second.stderr).toMatch(/kept existing .*config\.toml/);
    expect(await readFile(conf, 'utf8')).toBe('# edited by the operator\n[blob]\nchunk_size = 100000\n');
    expect(existsSync(marker)).toBe(false); // the program directory is replaced as a whole
    expect(await listTree(prefix, skip)).toEqual(before);
    // No staging leftovers.
    expect((await readdir(join(prefix, 'lib'))).filter((n) => n.startsWith('.'))).toEqual([]);
    expect((await stat(join(prefix, 'bin/stargz-store'))).mode & 0o777).toBe(0o755);
  }, 180_000);

  it('rejects unknown arguments and documents its options', async () => {
    const r = await run('bash', ['scripts/install.sh', '--bogus']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown argument --bogus/);
    const h = await run('bash', ['scripts/install.sh', '--help']);
    expect(h.code).toBe(0);
    expect(h.stdout).toMatch(/--prefix DIR/);
  });
});
