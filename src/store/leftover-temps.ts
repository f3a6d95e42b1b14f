import { readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../util/logger.js';
import { rootLayout } from '../util/root-layout.js';

/** A temp file of util/atomic-file.ts (`<file>.<12 hex>.tmp`). */
const ATOMIC_TEMP = /\.[0-9a-f]{12}\.tmp$/;
const PINS_TEMP = /^pins\.json\.[0-9a-f]+\.tmp$/;

/**
 * Remove the temp files of metadata writes a killed store left between write and rename
 * (resolution records, saved TOCs, layer states, pins.json): the renamed file was never replaced,
 * so they hold nothing of value, and `stargz-store check` would report each of them. Run at
 * start-up only, under the root's instance lock, before this process writes anything (its own
 * temps would look the same). Returns how many were removed.
 */
export async function removeLeftoverTemps(root: string, logger?: Logger): Promise<number> {
  const l = rootLayout(root);
  const dirs: Array<[string, RegExp]> = [
    [l.metadataLayers, ATOMIC_TEMP],
    [l.metadataTocs, ATOMIC_TEMP],
    [l.layerState, ATOMIC_TEMP],
    [root, PINS_TEMP],
  ];
  let removed = 0;
  for (const [dir, pattern] of dirs) {
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      if (!pattern.test(name)) continue;
      await unlink(join(dir, name)).then(
        () => removed++,
        (err: unknown) => logger?.warn({ err, path: join(dir, name) }, 'cannot remove a leftover temp file'),
      );
    }
  }
  if (removed > 0) logger?.info({ removed, root }, 'removed temp files of interrupted metadata writes');
  return removed;
}
