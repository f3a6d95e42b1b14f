/**
 * bin/ launchers run the CLI on the pinned Node whatever `node` is first on PATH (here: a PATH with
 * only the system directories, where `node` is the distribution's, if any).
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
  version: string;
  bin: Record<string, string>;
  optionalDependencies: Record<string, string>;
};
const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

describe('bin/ launchers', () => {
  beforeAll(() => {
    if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    }
  });

  it('stargz-store --version reports the pinned Node without node_modules/.bin on PATH', async () => {
    const { stdout } = await promisify(execFile)(join(REPO, pkg.bin['stargz-store']!), ['--version'], {
      env: { PATH: SYSTEM_PATH, HOME: process.env.HOME ?? '/root' },
    });
    const pinned = pkg.optionalDependencies[`node-linux-${process.arch}`];
    expect(stdout.trim()).toBe(`stargz-store ${pkg.version} (node v${pinned})`);
  });

  it('stargz-store-helper --version reports the pinned Node too', async () => {
    const { stdout } = await promisify(execFile)(join(REPO, pkg.bin['stargz-store-helper']!), ['--version'], {
      env: { PATH: SYSTEM_PATH },
    });
    const pinned = pkg.optionalDependencies[`node-linux-${process.arch}`];
    expect(stdout.trim()).toBe(`stargz-store-helper ${pkg.version} (node v${pinned})`);
  });

  it('scripts/npm-ci.sh runs npm on the Node package.json pins', async () => {
    const { stdout } = await promisify(execFile)('bash', [join(REPO, 'scripts/npm-ci.sh'), '--print-pin']);
    expect(stdout.trim()).toBe(
      `node-linux-${process.arch}@${pkg.optionalDependencies[`node-linux-${process.arch}`]}`,
    );
  });
});
