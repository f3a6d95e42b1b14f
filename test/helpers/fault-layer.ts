import { join } from 'node:path';
import type { ChunkCache } from '../../src/cache/index.js';
import type { LayerIndex, TreeNode } from '../../src/format/model.js';
import { openLayer } from '../../src/format/open-layer.js';
import { buildLayerToFile } from '../../src/format/writer/index.js';
import { FetchScheduler, LazyLayer } from '../../src/layer/index.js';
import type { Logger } from '../../src/util/logger.js';
import type { RangeReader } from '../../src/util/range-reader.js';
import { expectedFile } from '../integration/engine-helpers.js';

/**
 * The fixture of the cache fault tests (fault-corrupt-at-rest, fault-disk-full): a tar fixture
 * encoded to a blob, opened as a LazyLayer that only fetches on demand, and a checker that reads
 * every file whole and compares it with the fixture tree.
 */

export type FaultFormat = 'estargz' | 'zstd:chunked';

/** Encode `tarPath` as `format` into `<work>/<format>.blob` (gzip level 1: quick). Returns the path. */
export async function buildFaultBlob(
  work: string,
  tarPath: string,
  format: FaultFormat,
  chunkSize: number,
): Promise<string> {
  const blobPath = join(work, `${format.replace(':', '-')}.blob`);
  await buildLayerToFile(tarPath, blobPath, { format, chunkSize, gzipLevel: 1 });
  return blobPath;
}

export interface FaultLayerOptions {
  source: RangeReader;
  cache: ChunkCache;
  layerKey: string;
  logger?: Logger;
}

/**
 * Open the TOC of `source` and wrap it in a LazyLayer with no prefetch and no background fetch
 * (every fetch is a read's) and a scheduler that never waits for quiet.
 */
export async function openFaultLayer(o: FaultLayerOptions): Promise<{ index: LayerIndex; layer: LazyLayer }> {
  const index = await openLayer(o.source);
  const layer = new LazyLayer({
    index,
    source: o.source,
    cache: o.cache,
    layerKey: o.layerKey,
    backgroundFetch: false,
    prefetch: false,
    scheduler: new FetchScheduler({ quietMs: 0 }),
    ...(o.logger ? { logger: o.logger } : {}),
  });
  return { index, layer };
}

/** Reads `files` whole through `layer`, counting the bytes compared with the tree and the wrong files. */
export class TreeChecker {
  bytesChecked = 0;
  wrong = 0;

  constructor(
    private readonly layer: LazyLayer,
    private readonly files: readonly TreeNode[],
    private readonly tree: string,
  ) {}

  async readAll(): Promise<void> {
    for (const n of this.files) {
      const got = await this.layer.read(n, 0, n.size);
      const want = await expectedFile(this.tree, n.path);
      this.bytesChecked += want.length;
      if (!got.equals(want)) this.wrong++;
    }
  }
}
