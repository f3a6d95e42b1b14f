/**
 * What an operator sees from one-shot commands: a digest option checked before any work, a progress
 * line on a terminal only (pipes get the result alone), and local commands that stay fast because
 * they do not load the HTTP stack.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VECTOR_A } from '../helpers/format-fixtures.js';
import { BIN_CLI, runCli } from '../helpers/serve-cli.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(REPO, 'bin/stargz-store.js');

/** `stargz-store <args>` as built, run to its end. */
const cli = (args: string[]) => runCli(BIN_CLI, args);

describe('one-shot command output', () => {
  let dir: string;
  let tar: string;

  beforeAll(async () => {
    if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
    dir = await mkdtemp(join(tmpdir(), 'cli-output-'));
    await mkdir(join(dir, 'in'));
    await writeFile(join(dir, 'in/big.bin'), randomBytes(6 << 20));
    await writeFile(join(dir, 'in/small.txt'), 'hello\n');
    tar = join(dir, 'in.tar');
    await promisify(execFile)('tar', ['-cf', tar, '-C', join(dir, 'in'), '.']);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('--toc-digest must be a digest: one line, exit 1, before the blob is opened', async () => {
    for (const bad of ['abc', 'sha256:XYZ', `sha256:${'a'.repeat(63)}`]) {
      const r = await cli(['layer', 'inspect', '--toc-digest', bad, join(dir, 'does-not-exist')]);
      expect(r.code, bad).toBe(1);
      expect(r.stderr.trim().split('\n')).toEqual([
        `stargz-store: E_INVALID_ARGUMENT: --toc-digest must be a digest like sha256:<64 lowercase hex digits>, got '${bad}'`,
      ]);
    }
  });

  it('layer build through a pipe prints the result only', async () => {
    const r = await cli(['layer', 'build', tar, join(dir, 'out-pipe.blob')]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect((JSON.parse(r.stdout) as { tocDigest: string }).tocDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('layer build on a terminal shows a progress line', async () => {
    // script(1) gives the command a pseudo-terminal; its typescript goes to /dev/null, output to us.
    const cmd = `${process.execPath} ${CLI} layer build --format zstd:chunked ${tar} ${join(dir, 'out-tty.blob')}`;
    const { stdout } = await promisify(execFile)('script', ['-qefc', cmd, '/dev/null'], {
      env: { ...process.env, TERM: 'xterm' },
    });
    expect(stdout).toContain('layer build zstd:chunked');
    expect(stdout).toMatch(/"tocDigest": "sha256:[0-9a-f]{64}"/);
  });

  it('local commands do not load the HTTP stack, FUSE, pino or the codecs they do not use', async () => {
    // Node 24 synchronous module hooks print every module the CLI loads.
    const hook =
      "import{registerHooks}from'node:module';registerHooks({load(u,c,n){if(!u.startsWith('node:'))process.stderr.write('LOAD '+u+'\\n');return n(u,c)}})";
    const loads = async (args: string[]): Promise<string[]> => {
      const r = await promisify(execFile)(process.execPath, [
        '--import',
        `data:text/javascript,${encodeURIComponent(hook)}`,
        CLI,
        ...args,
      ]);
      return r.stderr.split('\n').filter((l) => l.startsWith('LOAD '));
    };
    for (const args of [['--version'], ['--help'], ['status', '--help'], ['layer', 'inspect', VECTOR_A]]) {
      const loaded = await loads(args);
      expect(loaded.length, args.join(' ')).toBeGreaterThan(5); // the hook saw the CLI's modules
      expect(
        loaded.filter((l) => /node_modules\/(undici|fuse-native|pino)\//.test(l)),
        args.join(' '),
      ).toEqual([]);
      expect(
        loaded.filter((l) => /dist\/src\/(registry\/client|store\/index|layer|cache)/.test(l)),
        args.join(' '),
      ).toEqual([]);
    }
    expect((await loads(['--version'])).filter((l) => l.includes('zstd-napi'))).toEqual([]);
  });
});
