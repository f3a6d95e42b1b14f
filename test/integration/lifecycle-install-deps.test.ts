/**
 * scripts/install-deps.sh, run with fake apt-get / dpkg-query / systemctl on PATH that record what
 * they were asked: the node recipe (README) installs the run-time packages only and starts nothing;
 * the test set (--all) is installed under a policy-rc.d that refuses service starts.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const SERVICES = /\b(docker-registry|containerd|stargz-snapshotter|podman|skopeo|debootstrap)\b/;

interface Result {
  code: number;
  stderr: string;
  calls: string[];
}

describe('scripts/install-deps.sh', () => {
  let tmp: string;
  let log: string;
  let policy: string;

  beforeEach(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'install-deps-'));
    log = join(tmp, 'calls.log');
    policy = join(tmp, 'policy-rc.d');
    const fake = (name: string, body: string): Promise<void> =>
      writeFile(join(tmp, name), `#!/bin/sh\n${body}\n`).then(() => chmod(join(tmp, name), 0o755));
    // Nothing is installed yet; apt-get records its arguments and whether services may start.
    await fake('dpkg-query', 'exit 1');
    await fake(
      'apt-get',
      `if [ -x "$INSTALL_DEPS_POLICY_RC_D" ]; then "$INSTALL_DEPS_POLICY_RC_D" x start; p=$?; else p=none; fi\n` +
        `echo "apt-get policy=$p $*" >> "${log}"`,
    );
    for (const s of ['systemctl', 'service', 'invoke-rc.d', 'deb-systemd-invoke'])
      await fake(s, `echo "${s} $*" >> "${log}"`);
  });
  afterEach(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  function run(args: string[]): Promise<Result> {
    return new Promise((resolve) => {
      execFile(
        'bash',
        [join(REPO, 'scripts/install-deps.sh'), ...args],
        { env: { PATH: `${tmp}:/usr/sbin:/usr/bin:/sbin:/bin`, INSTALL_DEPS_POLICY_RC_D: policy } },
        (err, _stdout, stderr) => {
          void readFile(log, 'utf8')
            .catch(() => '')
            .then((text) =>
              resolve({
                code: err ? ((err as { code?: number }).code ?? 1) : 0,
                stderr,
                calls: text.split('\n').filter((l) => l !== ''),
              }),
            );
        },
      );
    });
  }

  it('the README node recipe runs it without --all', async () => {
    const readme = await readFile(join(REPO, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Running it on a node'));
    const recipe = /```sh\n([\s\S]*?)```/.exec(section)![1]!;
    const steps = recipe.split('\n').filter((l) => l.includes('install-deps.sh'));
    expect(steps.length).toBe(1);
    expect(steps[0]).toMatch(/bash scripts\/install-deps\.sh(?! --all)/);
    expect(recipe).not.toMatch(/--all|systemctl (enable|start)[^\n]*(docker-registry|containerd)/);
  });

  it('by default installs libfuse2 and fuse only, and starts no service', async () => {
    const r = await run([]);
    expect(r.code).toBe(0);
    const installs = r.calls.filter((c) => / install /.test(c));
    expect(installs).toHaveLength(1);
    expect(installs[0]!.split(' ').slice(-2)).toEqual(['libfuse2', 'fuse']);
    expect(r.calls.join('\n')).not.toMatch(SERVICES);
    expect(r.calls.filter((c) => !c.startsWith('apt-get '))).toEqual([]); // no systemctl/service call
    expect(existsSync(policy)).toBe(false); // removed again
  });

  it('--all adds the test components, installed while service starts are refused', async () => {
    const r = await run(['--all']);
    const installs = r.calls.filter((c) => / install /.test(c));
    expect(installs).toHaveLength(1);
    for (const p of ['libfuse2', 'fuse', 'docker-registry', 'containerd', 'podman'])
      expect(installs[0]!.split(' ')).toContain(p);
    expect(installs[0]).toMatch(/^apt-get policy=101 /);
    expect(r.calls.filter((c) => !c.startsWith('apt-get '))).toEqual([]);
    expect(existsSync(policy)).toBe(false);
  });

  it('--print lists each set; unknown arguments are refused', async () => {
    const runtime = await new Promise<string>((res, rej) =>
      execFile('bash', [join(REPO, 'scripts/install-deps.sh'), '--print'], (e, out) =>
        e ? rej(e) : res(out),
      ),
    );
    expect(runtime.trim().split('\n')).toEqual(['libfuse2', 'fuse']);
    const bad = await run(['--bogus']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/unknown argument --bogus/);
  });
});
