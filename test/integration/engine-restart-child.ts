/**
 * Child process of engine-registry.test.ts: a fresh process on an existing store root reads
 * every regular file of a layer. The layer index comes from a local copy of the blob (standing in
 * for the store's persisted metadata); chunk data may only come from the cache or the registry,
 * whose blob is opened lazily so that "no request" is observable. Prints one JSON line.
 */
import { createHash } from 'node:crypto';
import { ChunkCache } from '../../src/cache/index.js';
import { openLayer } from '../../src/format/open-layer.js';
import { LazyLayer, type BlobSource } from '../../src/layer/index.js';
import { parseReference, RegistryClient, type BlobReader } from '../../src/registry/index.js';
import { FileRangeReader } from '../../src/util/range-reader.js';
import { parseDigest } from '../../src/util/digest.js';

interface Args {
  root: string;
  blobFile: string;
  ref: string;
  digest: string;
  expected: Record<string, string>;
}

const args = JSON.parse(process.argv[2]!) as Args;
const cache = await ChunkCache.open({ root: args.root, minFreeBytes: 0 });
const local = await FileRangeReader.open(args.blobFile);
const index = await openLayer(local);
await local.close();
const client = new RegistryClient({});
let reader: Promise<BlobReader> | undefined;
const open = (): Promise<BlobReader> =>
  (reader ??= client.openBlob(parseReference(args.ref), parseDigest(args.digest), { size: index.blobSize }));
const source: BlobSource = {
  size: index.blobSize,
  read: async (offset, length, signal) => (await open()).read(offset, length, signal),
  readRanges: async (ranges, opts) => (await open()).readRanges(ranges, opts),
};
const layer = new LazyLayer({
  index,
  source,
  cache,
  layerKey: args.digest,
  backgroundFetch: false,
  prefetch: false,
});
let files = 0;
let mismatches = 0;
for (const n of index.nodes) {
  if (n === undefined || n.type !== 'reg') continue;
  files++;
  const data = await layer.read(n, 0, n.size);
  const digest = 'sha256:' + createHash('sha256').update(data).digest('hex');
  if (digest !== args.expected[n.path]) mismatches++;
}
const requests = reader === undefined ? 0 : (await reader).stats().requests;
process.stdout.write(
  JSON.stringify({ files, mismatches, opened: reader !== undefined, requests, cache: cache.stats() }) + '\n',
);
await cache.close();
await client.close();
