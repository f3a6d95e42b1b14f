/**
 * TOC benchmark: how long opening a layer's metadata takes (footer, TOC fetch, inflate, digest,
 * parse, tree) and how much memory it needs, for synthetic eStargz / zstd:chunked layers of 50k
 * and 500k entries, the samples/small TOCs (2-3 MB of JSON, the "53 MB layer" of issue 10) and a
 * hostile 2,000,000-entry TOC that must be refused early.
 *
 *   npm run build && node dist/bench/toc.js [--entries 50000,500000] [--rounds 3] [--no-samples]
 *     [--hostile 2000000] [--lean 500000] [--format estargz,zstd:chunked] [--resolve] [--child]
 *
 * --resolve: instead, the store's whole resolution of each samples/small layer (OLD protocol,
 * manifest known to an in-memory registry, fresh --root each time): lookup of `info` until its
 * bytes are answered, as the `ms` of the store's `layer resolved` log line.
 *
 * Every case runs in a fresh child process (`--child`), with the store's V8 options
 * (bin/node-options), so its peak RSS is its own: `peakRssMB` is the first open's (what opening
 * one TOC costs the store), `peakAllRoundsMB` that of all rounds (garbage of earlier ones); synthetic
 * layers are cached under $TOC_BENCH_CACHE (default /tmp/stargz-toc-bench). `cpuP50ms` is the
 * process CPU time of one open (zlib thread pool included): on a shared, loaded machine it is
 * the steadier figure, wall time the one users see.
 * Not a test: it prints figures, asserts nothing about speed.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { mkdtemp, rm } from 'node:fs/promises';
import { ChunkCache } from '../src/cache/chunk-cache.js';
import { openLayer } from '../src/format/open-layer.js';
import { createLayerStore } from '../src/store/index.js';
import { defaultOpenLayer, lazyLayerFactory } from '../src/store/default-deps.js';
import type { LayerMatch, StoreRegistry } from '../src/store/deps.js';
import { estargzFooter } from '../src/format/estargz/footer.js';
import { skippableFrame, zstdChunkedFooter, zstdCompressor } from '../src/format/writer/zstd-chunked.js';
import { StoreError } from '../src/util/errors.js';
import { storeNodeOptions } from './lib/node-options.js';
import type { RangeReader } from '../src/util/range-reader.js';
import { parseDigest } from '../src/util/digest.js';

const SHARED = process.env['STARGZ_SHARED'] ?? '/work/shared';
/** Synthetic layers are built once and kept here, so every run (and every commit) reads the same bytes. */
const CACHE = process.env['TOC_BENCH_CACHE'] ?? join(tmpdir(), 'stargz-toc-bench');

/** A blob of which only [tailStart, size) exists; the data region before it reads as zeros. */
class TailOnlyReader implements RangeReader {
  requests = 0;
  constructor(
    readonly size: number,
    readonly tailStart: number,
    readonly tail: Buffer,
  ) {}
  async read(offset: number, length: number): Promise<Buffer> {
    this.requests++;
    const out = Buffer.alloc(length);
    const from = Math.max(offset, this.tailStart);
    if (from < offset + length)
      this.tail.copy(out, from - offset, from - this.tailStart, offset + length - this.tailStart);
    return out;
  }
}

function ustar(name: string, size: number): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0, 'utf8');
  h.write('0000644\0', 100, 'latin1');
  h.write('0000000\0', 108, 'latin1');
  h.write('0000000\0', 116, 'latin1');
  h.write(size.toString(8).padStart(11, '0') + '\0', 124, 'latin1');
  h.write('00000000000\0', 136, 'latin1');
  h.write('        ', 148, 'latin1');
  h.write('0', 156, 'latin1');
  h.write('ustar\0' + '00', 257, 'latin1');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1');
  return h;
}

/**
 * Entries like a Go writer emits for a big tree: a directory every 20 entries, regular files of
 * 1-8 KiB with their own member offset, digest and chunkDigest, some symlinks and empty files.
 */
function syntheticEntries(n: number, dataSpan: number): { entries: unknown[]; dataEnd: number } {
  const entries: unknown[] = [];
  let dir = '';
  let offset = 0;
  const step = Math.max(1, Math.floor(dataSpan / n));
  for (let i = 0; i < n; i++) {
    if (i % 20 === 0) {
      dir = `usr/lib/pkg${Math.floor(i / 2000)}/d${i}`;
      entries.push({ name: dir + '/', type: 'dir', modtime: '2024-05-06T07:08:09Z', mode: 16877 });
      continue;
    }
    const name = `${dir}/file-${i}.py`;
    if (i % 20 === 7) {
      entries.push({ name, type: 'symlink', linkName: `../file-${i - 1}.py`, mode: 41471 });
      continue;
    }
    if (i % 20 === 13) {
      entries.push({ name, type: 'reg', modtime: '2024-05-06T07:08:09Z', mode: 33188 });
      continue;
    }
    const digest = 'sha256:' + createHash('sha256').update(String(i)).digest('hex');
    entries.push({
      name,
      type: 'reg',
      size: 1024 + (i % 8) * 1024,
      modtime: '2024-05-06T07:08:09Z',
      mode: 33188,
      offset,
      digest,
      chunkDigest: digest,
    });
    offset += step;
  }
  return { entries, dataEnd: offset + step };
}

interface Layer {
  reader: TailOnlyReader;
  tocDigest: string;
  jsonBytes: number;
  tocBytes: number;
  hint?: number;
}

function estargzLayer(json: Buffer, dataEnd: number): Layer {
  const tar = Buffer.concat([
    ustar('stargz.index.json', json.length),
    json,
    Buffer.alloc((512 - (json.length % 512)) % 512),
    Buffer.alloc(1024),
  ]);
  const member = gzipSync(tar, { level: 6 });
  member[9] = 0xff;
  const tail = Buffer.concat([member, estargzFooter(dataEnd)]);
  const tocDigest = 'sha256:' + createHash('sha256').update(json).digest('hex');
  return {
    reader: new TailOnlyReader(dataEnd + tail.length, dataEnd, tail),
    tocDigest,
    jsonBytes: json.length,
    tocBytes: member.length,
  };
}

function zstdLayer(json: Buffer, dataEnd: number): Layer {
  const compressed = zstdCompressor(3)(json);
  const manifestOffset = dataEnd + 8;
  const footer = zstdChunkedFooter({
    manifestOffset,
    manifestLength: compressed.length,
    manifestUncompressed: json.length,
    // no tar-split: an empty range right after the manifest
    tarSplitOffset: manifestOffset + compressed.length,
    tarSplitLength: 0,
    tarSplitUncompressed: 0,
  });
  const tail = Buffer.concat([skippableFrame(compressed), footer]);
  const tocDigest = 'sha256:' + createHash('sha256').update(compressed).digest('hex');
  return {
    reader: new TailOnlyReader(dataEnd + tail.length, dataEnd, tail),
    tocDigest,
    jsonBytes: json.length,
    tocBytes: compressed.length,
    hint: manifestOffset,
  };
}

function sampleLayer(dir: string): Layer {
  const d = join(SHARED, 'samples/small', dir);
  const tailFile = readdirSync(d).find((f) => f.includes('.tail-from-'))!;
  let start = Number(tailFile.split('.tail-from-')[1]);
  const manifest = JSON.parse(readFileSync(join(d, 'manifest.json'), 'utf8')) as {
    layers: Array<{ size: number; annotations: Record<string, string> }>;
  };
  const layer = manifest.layers[0]!;
  const ann = layer.annotations;
  let tail = readFileSync(join(d, tailFile));
  const position = ann['io.containers.zstd-chunked.manifest-position'];
  let hint: number | undefined;
  if (position !== undefined) {
    const [offset, length] = position.split(':').map(Number) as [number, number];
    const header = Buffer.alloc(8);
    header.writeUInt32LE(0x184d2a50, 0);
    header.writeUInt32LE(length, 4);
    tail = Buffer.concat([header, tail]);
    start -= 8;
    hint = offset;
  }
  const tocDigest =
    ann['io.containers.zstd-chunked.manifest-checksum'] ?? ann['containerd.io/snapshot/stargz/toc.digest']!;
  const out: Layer = {
    reader: new TailOnlyReader(layer.size, start, tail),
    tocDigest,
    jsonBytes: 0,
    tocBytes: tail.length,
  };
  if (hint !== undefined) out.hint = hint;
  return out;
}

function makeLayer(spec: string): Layer {
  const [kind, arg, format] = spec.split(':') as [string, string, string | undefined];
  if (kind === 'sample') return sampleLayer(arg);
  const n = Number(arg);
  let json: Buffer;
  let dataEnd: number;
  if (kind === 'lean') {
    // no file content: directories, empty files and symlinks (~60 bytes of JSON per entry)
    const parts: string[] = [];
    for (let i = 0; i < n; i++) {
      const d = Math.floor(i / 100);
      parts.push(
        i % 100 === 0
          ? `{"name":"./usr/d${d}/","type":"dir","mode":493}`
          : i % 33 === 0
            ? `{"name":"./usr/d${d}/l${i}","type":"symlink","linkName":"f${i + 1}"}`
            : `{"name":"./usr/d${d}/f${i}","type":"reg","mode":420}`,
      );
    }
    json = Buffer.from(`{"version":1,"entries":[${parts.join(',')}]}`);
    dataEnd = 1024;
  } else if (kind === 'hostile') {
    // 2M tiny entries, as in issue 10: ~31 bytes each, a few hundred KB compressed
    const one = '{"name":"a/b","type":"dir"},';
    json = Buffer.from(`{"version":1,"entries":[${one.repeat(n - 1)}{"name":"a/b","type":"dir"}]}`);
    dataEnd = 1024;
  } else {
    const built = syntheticEntries(n, 200 * n);
    json = Buffer.from(JSON.stringify({ version: 1, entries: built.entries }));
    dataEnd = built.dataEnd;
  }
  return format === 'zstd' ? zstdLayer(json, dataEnd) : estargzLayer(json, dataEnd);
}

/** Build (or load from the cache) the layer of `spec`: its tail bytes and how to open it. */
function loadLayer(spec: string): Layer {
  const file = join(CACHE, spec.replace(/[^a-z0-9-]+/gi, '_'));
  if (!existsSync(file + '.json')) {
    const l = makeLayer(spec);
    mkdirSync(CACHE, { recursive: true });
    writeFileSync(file + '.tail', l.reader.tail);
    const meta = {
      size: l.reader.size,
      tailStart: l.reader.tailStart,
      tocDigest: l.tocDigest,
      jsonBytes: l.jsonBytes,
      tocBytes: l.tocBytes,
      hint: l.hint,
    };
    writeFileSync(file + '.json', JSON.stringify(meta));
  }
  const m = JSON.parse(readFileSync(file + '.json', 'utf8')) as Omit<Layer, 'reader'> & {
    size: number;
    tailStart: number;
  };
  const out: Layer = {
    reader: new TailOnlyReader(m.size, m.tailStart, readFileSync(file + '.tail')),
    tocDigest: m.tocDigest,
    jsonBytes: m.jsonBytes,
    tocBytes: m.tocBytes,
  };
  if (m.hint !== undefined && m.hint !== null) out.hint = m.hint;
  return out;
}

/** One case in this process: time `rounds` opens of a cached layer and sample RSS meanwhile. */
async function child(spec: string, rounds: number): Promise<void> {
  const layer = loadLayer(spec);
  global.gc?.();
  const baseRss = process.memoryUsage.rss();
  const baseHeap = process.memoryUsage().heapUsed;
  let treeHeap = 0;
  let peak = baseRss;
  let firstPeak = baseRss;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 10);
  const cpu: number[] = [];
  const times: number[] = [];
  let outcome = '';
  let maxLag = 0;
  let last = performance.now();
  const lagTimer = setInterval(() => {
    const now = performance.now();
    maxLag = Math.max(maxLag, now - last - 1);
    last = now;
  }, 1);
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    try {
      const opts: Parameters<typeof openLayer>[1] = {
        expectedTocDigest: layer.tocDigest,
        maxTocBytes: 256 << 20,
      };
      if (layer.hint !== undefined) opts.tocOffsetHint = layer.hint;
      const index = await openLayer(layer.reader, opts);
      outcome = `ok nodes=${index.nodes.length - 1}`;
      if (r === 0) {
        // what the opened index itself keeps on the heap (two collections: parse garbage gone)
        peak = Math.max(peak, process.memoryUsage.rss());
        global.gc?.();
        global.gc?.();
        treeHeap = process.memoryUsage().heapUsed - baseHeap;
      }
    } catch (err) {
      outcome = err instanceof StoreError ? `refused ${err.code}` : `error ${String(err)}`;
    }
    times.push(performance.now() - t0);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
    peak = Math.max(peak, process.memoryUsage.rss());
    // what one open costs a fresh process; later rounds add the garbage of the earlier ones
    if (r === 0) firstPeak = peak;
  }
  clearInterval(sampler);
  clearInterval(lagTimer);
  times.sort((a, b) => a - b);
  cpu.sort((a, b) => a - b);
  const mb = (b: number) => (b / 2 ** 20).toFixed(0);
  process.stdout.write(
    JSON.stringify({
      spec,
      jsonMB: +(layer.jsonBytes / 2 ** 20).toFixed(1),
      tocKB: Math.round(layer.tocBytes / 1024),
      p50ms: Math.round(times[Math.floor(times.length / 2)]!),
      minMs: Math.round(times[0]!),
      cpuP50ms: Math.round(cpu[Math.floor(cpu.length / 2)]!),
      maxLoopStallMs: Math.round(maxLag),
      baseRssMB: +mb(baseRss),
      peakRssMB: +mb(firstPeak),
      peakAllRoundsMB: +mb(peak),
      indexHeapMB: +mb(treeHeap),
      outcome,
    }) + '\n',
  );
}

/** The store's resolution of one samples/small layer, lookup to answered `info`, `rounds` times. */
async function resolveSample(dir: string, rounds: number): Promise<void> {
  const d = join(SHARED, 'samples/small', dir);
  const manifest = JSON.parse(readFileSync(join(d, 'manifest.json'), 'utf8')) as {
    config: { digest: string };
    layers: Array<{ digest: string; size: number; mediaType: string; annotations: Record<string, string> }>;
  };
  const config = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8')) as {
    rootfs: { diff_ids: string[] };
  };
  const layer = sampleLayer(dir);
  const desc = manifest.layers[0]!;
  const ref = `127.0.0.1:5000/lab/small-${dir}:latest`;
  const registry: StoreRegistry = {
    findLayer: async (): Promise<LayerMatch> => ({
      manifestDigest: 'sha256:' + '0'.repeat(64),
      configDigest: manifest.config.digest,
      descriptor: {
        digest: parseDigest(desc.digest),
        size: desc.size,
        mediaType: desc.mediaType,
        annotations: desc.annotations,
      },
      matchedBy: 'blob',
      diffId: config.rootfs.diff_ids[0],
    }),
    openBlob: async () => layer.reader,
  };
  const times: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const root = await mkdtemp(join(tmpdir(), 'toc-resolve-'));
    const cache = await ChunkCache.open({ root: join(root, 'cache') });
    const store = createLayerStore({
      root,
      registry,
      openLayer: defaultOpenLayer,
      createLayer: lazyLayerFactory(cache, { backgroundFetch: false, prefetch: false }),
      deadlines: { lookupMs: 60_000, readMs: 60_000, syntheticMs: 1000 },
      startLayers: false,
    });
    const t0 = performance.now();
    const f = await store.vfs.open(`/${Buffer.from(ref).toString('base64')}/${desc.digest}/info`, 0, {
      signal: new AbortController().signal,
    });
    const info = await f.read(0, 4096, new AbortController().signal);
    times.push(performance.now() - t0);
    if (!info.toString().includes('"diff-size"')) throw new Error(`unexpected info ${info.toString()}`);
    await store.close();
    await cache.close();
    await rm(root, { recursive: true, force: true });
  }
  const sorted = [...times].sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      resolve: dir,
      firstMs: Math.round(times[0]!),
      p50ms: Math.round(sorted[Math.floor(sorted.length / 2)]!),
      minMs: Math.round(sorted[0]!),
    }),
  );
}

function parseArgs(argv: string[]): { specs: string[]; rounds: number; child?: string; resolve: boolean } {
  let entries = [50_000, 500_000];
  let formats = ['estargz', 'zstd'];
  let rounds = 3;
  let samples = true;
  let hostile = [2_000_000];
  let lean: number[] = [];
  let childSpec: string | undefined;
  let resolve = false;
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1] ?? '';
    switch (argv[i]) {
      case '--entries':
        entries = v === '' || v === 'none' ? [] : v.split(',').map(Number);
        i++;
        break;
      case '--format':
        formats = v.split(',').map((f) => (f.startsWith('zstd') ? 'zstd' : 'estargz'));
        i++;
        break;
      case '--rounds':
        rounds = Number(v);
        i++;
        break;
      case '--no-samples':
        samples = false;
        break;
      case '--lean':
        lean = v.split(',').map(Number);
        i++;
        break;
      case '--hostile':
        hostile = v === 'none' ? [] : v.split(',').map(Number);
        i++;
        break;
      case '--resolve':
        resolve = true;
        break;
      case '--child':
        childSpec = v;
        i++;
        break;
    }
  }
  const specs: string[] = [];
  if (samples)
    for (const d of ['estargz', 'esgz-opt', 'zstd-chunked', 'ctr-zstdchunked']) specs.push(`sample:${d}`);
  for (const n of entries) for (const f of formats) specs.push(`synthetic:${n}:${f}`);
  for (const n of lean) specs.push(`lean:${n}:estargz`);
  for (const n of hostile) specs.push(`hostile:${n}:estargz`, `hostile:${n}:zstd`);
  const out: { specs: string[]; rounds: number; child?: string; resolve: boolean } = {
    specs,
    rounds,
    resolve,
  };
  if (childSpec !== undefined) out.child = childSpec;
  return out;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.child !== undefined) {
    await child(args.child, args.rounds);
    return;
  }
  if (args.resolve) {
    console.log(`# store resolution, lookup to answered info (${args.rounds} rounds, fresh root each)`);
    for (const d of ['estargz', 'esgz-opt', 'zstd-chunked', 'ctr-zstdchunked'])
      await resolveSample(d, args.rounds);
    return;
  }
  const self = fileURLToPath(import.meta.url);
  const rev = (() => {
    try {
      return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    } catch {
      return '?';
    }
  })();
  console.log(
    `# TOC open benchmark (commit ${rev}, node ${process.version}, ${args.rounds} rounds per case)`,
  );
  // each case runs with the store's V8 options (heap sizing decides its peak RSS)
  const nodeOptions = storeNodeOptions(join(dirname(self), '../..'));
  // build missing layers first (in this process), so the children only read them
  for (const spec of args.specs) loadLayer(spec);
  for (const spec of args.specs) {
    const r = spawnSync(
      process.execPath,
      [...nodeOptions, '--expose-gc', self, '--child', spec, '--rounds', String(args.rounds)],
      {
        encoding: 'utf8',
        maxBuffer: 1 << 20,
      },
    );
    if (r.status !== 0) console.log(JSON.stringify({ spec, failed: r.status, stderr: r.stderr.slice(-500) }));
    else process.stdout.write(r.stdout);
  }
}

await main();
