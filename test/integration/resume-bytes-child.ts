/**
 * Child process of resume-bytes.test.ts: one "store run" on a root, for one layer pulled from the
 * registry: background fetch with the DiffID check, compressed bytes kept in the blob store.
 * With `stopAt`, the run ends once that many compressed bytes came from the registry: `kill`
 * kills the process on the spot (SIGKILL from inside, nothing flushed), `stop` closes everything
 * like a store shutdown. Prints one JSON line (unless killed).
 */
import { join } from 'node:path';
import { BlobStore, chunkCacheBudget } from '../../src/cache/blob-store.js';
import { ChunkCache } from '../../src/cache/index.js';
import { LocalFirstSource } from '../../src/layer/local-first-source.js';
import { openLayer } from '../../src/format/open-layer.js';
import { FetchScheduler, LazyLayer, type BlobSource } from '../../src/layer/index.js';
import { parseReference, RegistryClient, type BlobReader } from '../../src/registry/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';

interface Args {
  root: string;
  /** Local copy of the blob: stands in for the store's persisted TOC metadata only. */
  blobFile: string;
  ref: string;
  digest: string;
  diffID: string;
  stopAt?: number;
  mode: 'kill' | 'stop' | 'run';
}

const args = JSON.parse(process.argv[2]!) as Args;
const local = await FileRangeReader.open(args.blobFile);
const index = await openLayer(local);
await local.close();

const cache = await ChunkCache.open({ root: args.root, minFreeBytes: 0 });
// ChunkCache.has() is false for chunks on disk until the start-up scan indexed them, and the
// current background pass decides "cached?" with has(): without this wait a restarted store
// fetches chunks it already has (reported to the lead; the engine's pass should not rely on has()).
await cache.whenScanned();
const store = await BlobStore.open({
  root: args.root,
  budget: chunkCacheBudget(cache),
  checkpointBytes: 512 * 1024,
});
// The registry reader fetches exactly the requested ranges (no read-ahead bypasses the blob store).
const client = new RegistryClient();
let reader: Promise<BlobReader> | undefined;
const open = (): Promise<BlobReader> =>
  (reader ??= client.openBlob(parseReference(args.ref), args.digest, { size: index.blobSize }));
const registry: BlobSource = {
  size: index.blobSize,
  read: async (offset, length, signal) => (await open()).read(offset, length, signal),
  readRanges: async (ranges, opts) => (await open()).readRanges(ranges, opts),
};

let network = 0;
let stop!: () => void;
const stopped = new Promise<void>((r) => (stop = r));
const blob = await store.openBlob(args.digest, index.blobSize);
const coveredAtStart = blob.bytesCovered;
const source = new LocalFirstSource(registry, blob, {
  alignBytes: 50_000, // the registry reader's block size
  onNetworkBytes: (n) => {
    network += n;
    if (args.stopAt !== undefined && network >= args.stopAt) {
      if (args.mode === 'kill') process.kill(process.pid, 'SIGKILL');
      stop();
    }
  },
});
const layer = new LazyLayer({
  index,
  source,
  cache,
  layerKey: args.digest,
  expectedDiffID: args.diffID,
  stateDir: join(args.root, 'layers'),
  scheduler: new FetchScheduler({ quietMs: 0 }),
  backgroundUnitBytes: 256 * 1024,
  retryDelayMs: 10,
});
layer.start();
await Promise.race([stopped, layer.whenBackgroundDone()]);
await layer.close();
const state = layer.state();
// What the store does once a layer is fully verified: the compressed copy is no longer needed.
if (state.fullyVerified) await store.remove(args.digest);
const blobStats = store.stats();
const readerStats = reader === undefined ? undefined : (await reader).stats();
await store.close();
await cache.close();
await client.close();
process.stdout.write(
  JSON.stringify({
    fullyVerified: state.fullyVerified,
    bad: state.bad,
    lastError: state.lastError,
    network,
    coveredAtStart,
    blobStats,
    readerStats,
  }) + '\n',
);
