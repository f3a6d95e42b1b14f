/**
 * The suite itself runs on the Node pinned in package.json (npm scripts and npx put
 * node_modules/.bin, where node-linux-<arch> links its `node`, first on PATH), not on the system's.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';
import { packageVersion, versionLine } from '../../src/cli/version.js';

const repoFile = (f: string): string => fileURLToPath(new URL(`../../${f}`, import.meta.url));
const pkg = JSON.parse(readFileSync(repoFile('package.json'), 'utf8')) as {
  version: string;
  engines: { node: string };
  optionalDependencies: Record<string, string>;
};
const lock = JSON.parse(readFileSync(repoFile('package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; engines?: unknown }>;
};
const pinnedNode = pkg.optionalDependencies[`node-linux-${process.arch}`]!;

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

  it('every locked package accepts the pinned Node: npm ci on it has no EBADENGINE', () => {
    const refused: string[] = [];
    for (const [path, p] of Object.entries(lock.packages)) {
      const range = (p.engines as { node?: unknown } | undefined)?.node;
      if (typeof range !== 'string') continue;
      if (!semver.satisfies(pinnedNode, range)) refused.push(`${path || 'root'}: node ${range}`);
    }
    expect(refused).toEqual([]);
    expect(semver.satisfies(pinnedNode, pkg.engines.node)).toBe(true);
  });
});
