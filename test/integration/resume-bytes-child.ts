/**
 * Child process of resume-bytes.test.ts: one "store run" on a root, for one layer pulled from the
 * registry: background fetch with the DiffID check, compressed bytes kept in the blob store.
 * With `stopAt`, the run ends once that many compressed bytes came from the registry: `kill`
 * kills the process on the spot (SIGKILL from inside, nothing flushed), `stop` closes everything
 * like a store shutdown. Prints one JSON line (unless killed).
 */
import { join } from 'node:path';
import { chunkCacheBudget } from '../../src/cache/blob-files.js';
import { BlobStore } from '../../src/cache/blob-store.js';
import { ChunkCache } from '../../src/cache/index.js';
import { LocalBlobBinding } from '../../src/store/local-blob-binding.js';
import { silentLogger } from '../../src/util/logger.js';
import { openLayer } from '../../src/format/open-layer.js';
import { FetchScheduler, LazyLayer, type BlobSource } from '../../src/layer/index.js';
import { parseReference, RegistryClient, type BlobReader } from '../../src/registry/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import { parseDigest } from '../../src/util/digest.js';

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
  // A SIGKILL loses what is not on record: at most settleBytes = 2 x checkpointBytes (LocalBlob.settle holds
  // the background pass back) + the units in flight; 256 KiB keeps that near 2 % of this blob.
  checkpointBytes: 256 * 1024,
});
// The registry reader fetches exactly the requested ranges (no read-ahead bypasses the blob store).
const client = new RegistryClient();
let reader: Promise<BlobReader> | undefined;
const open = (): Promise<BlobReader> =>
  (reader ??= client.openBlob(parseReference(args.ref), parseDigest(args.digest), { size: index.blobSize }));

let network = 0;
let stop!: () => void;
const stopped = new Promise<void>((r) => (stop = r));
const counted = (n: number): void => {
  network += n;
  if (args.stopAt !== undefined && network >= args.stopAt) {
    if (args.mode === 'kill') process.kill(process.pid, 'SIGKILL');
    stop();
  }
};
// The registry as the layer sees it; every byte it returns is counted (the stop trigger).
const registry: BlobSource = {
  size: index.blobSize,
  read: async (offset, length, signal) => {
    const b = await (await open()).read(offset, length, signal);
    counted(b.length);
    return b;
  },
  readRanges: async (ranges, opts) => {
    const bufs = await (await open()).readRanges(ranges, opts);
    counted(bufs.reduce((n, b) => n + b.length, 0));
    return bufs;
  },
};
const coveredAtStart = (await store.openBlob(args.digest, index.blobSize)).bytesCovered;
// Wired exactly as the store wires it (src/store/default-deps.ts).
const localCopy = new LocalBlobBinding(store, args.digest, index.blobSize, silentLogger);
const layer = new LazyLayer({
  index,
  source: registry,
  cache,
  layerKey: args.digest,
  expectedDiffID: args.diffID,
  stateDir: join(args.root, 'layers'),
  scheduler: new FetchScheduler({ quietMs: 0 }),
  backgroundUnitBytes: 256 * 1024,
  retryDelayMs: 10,
  local: localCopy,
});
layer.start();
await Promise.race([stopped, layer.whenBackgroundDone()]);
await layer.close();
const state = layer.state();
// the layer discards its local copy once verified (not awaited there): wait for it before reporting
if (state.fullyVerified) await localCopy.discard();
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
