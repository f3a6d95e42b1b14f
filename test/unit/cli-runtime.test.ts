/**
 * The suite itself runs on the Node pinned in package.json (npm scripts and npx put
 * node_modules/.bin, where node-linux-<arch> links its `node`, first on PATH), not on the system's.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { packageVersion, versionLine } from '../../src/cli/version.js';

const pkg = JSON.parse(
  readFileSync(fileURLToPath(new URL('../../package.json', import.meta.url)), 'utf8'),
) as {
  version: string;
  optionalDependencies: Record<string, string>;
};

describe('runtime', () => {
  it('is the pinned Node 24 LTS', () => {
    const pinned = pkg.optionalDependencies[`node-linux-${process.arch}`];
    expect(pinned).toMatch(/^24\.\d+\.\d+$/);
    expect(process.version).toBe(`v${pinned}`);
  });

  it('pins the same Node for every architecture', () => {
    const pins = Object.entries(pkg.optionalDependencies).filter(([n]) => n.startsWith('node-linux-'));
    expect(pins.length).toBeGreaterThanOrEqual(2);
    expect(new Set(pins.map(([, v]) => v)).size).toBe(1);
  });

  it('--version names the package version and the running Node', () => {
    expect(packageVersion()).toBe(pkg.version);
    expect(versionLine()).toBe(`stargz-store ${pkg.version} (node ${process.version})`);
  });
});
