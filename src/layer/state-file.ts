import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../util/atomic-file.js';

/** What survives a restart about a layer: only facts that are expensive to re-establish. */
export interface PersistedLayerState {
  layerKey: string;
  /** The diff_id the whole stream was checked against. */
  diffID: string;
  fullyVerified: boolean;
  verifiedAt: string;
  /** Length of the verified DiffID stream (absent in files written by older versions). */
  uncompressedSize?: number;
}

function fileFor(dir: string, layerKey: string): string {
  return join(dir, layerKey.replace(/[^A-Za-z0-9._-]/g, '_') + '.json');
}

export async function loadLayerState(
  dir: string,
  layerKey: string,
): Promise<PersistedLayerState | undefined> {
  try {
    const parsed = JSON.parse(await readFile(fileFor(dir, layerKey), 'utf8')) as Partial<PersistedLayerState>;
    // The key is stored inside too: sanitised file names could collide.
    if (parsed.layerKey !== layerKey || typeof parsed.diffID !== 'string') return undefined;
    return parsed as PersistedLayerState;
  } catch {
    return undefined;
  }
}

export async function saveLayerState(dir: string, state: PersistedLayerState): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const file = fileFor(dir, state.layerKey);
  await writeFileAtomic(file, JSON.stringify(state) + '\n');
}
