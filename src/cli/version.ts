import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * `stargz-store <version> (node vX.Y.Z)`: the package version and the Node actually running, so an
 * operator sees at once whether the pinned runtime (not the system's node) is in use.
 */
export function versionLine(): string {
  return `stargz-store ${packageVersion()} (node ${process.version})`;
}

/** The version in our package.json, found upward from this file (src/cli or dist/src/cli). */
export function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'stargz-store-ts' && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // not here: look one level up
    }
    dir = dirname(dir);
  }
  return 'unknown';
}
