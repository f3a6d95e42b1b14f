import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The V8 options the store runs with (bin/node-options, as bin/stargz-store reads it): in-process
 * benchmarks of store code run their children with them, so heap growth and peak RSS are the
 * store's, not a bare node's (a 500,000-entry TOC: 250-260 MB peak against 360-380 without).
 */
export function storeNodeOptions(repo: string): string[] {
  return readFileSync(join(repo, 'bin/node-options'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
}
