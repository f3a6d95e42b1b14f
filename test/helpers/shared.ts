import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The project's reference material (vectors, samples, lab configs) lives in `../shared` beside the
 * repository (CI clones main with shared/ next to it). SHARED_DIR overrides.
 */
export const SHARED =
  process.env.SHARED_DIR ?? resolve(dirname(fileURLToPath(import.meta.url)), '../../../shared');
