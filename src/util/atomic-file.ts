import { randomBytes } from 'node:crypto';
import { rename, unlink, writeFile } from 'node:fs/promises';
import { crashPoint } from './crash-points.js';

/**
 * Write `data` to `path` all or nothing: a private temp file beside it, then a rename over it, so
 * a crash leaves the old file or the new one, never half of one. The temp file goes on failure.
 */
export async function writeFileAtomic(path: string, data: string | Buffer): Promise<void> {
  const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    await writeFile(tmp, data, { mode: 0o600 });
    crashPoint('metadata-write', path);
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw err;
  }
}
