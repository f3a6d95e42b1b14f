/**
 * `stargz-store layer inspect|cat|build`: one-shot tools over local blob files. Output goes to
 * stdout (JSON or raw bytes); errors surface as StoreError, which main.ts turns into a one-line
 * message on stderr and exit code 1.
 */
import { once } from 'node:events';
import { stat } from 'node:fs/promises';
import type { Command } from 'commander';
import type { LayerIndex, TreeNode } from '../format/model.js';
import { isValidDigest } from '../registry/reference.js';
import { StoreError } from '../util/errors.js';
import { startProgress } from './progress.js';
import type { FileRangeReader } from '../util/range-reader.js';

// Format readers and writers (zstd-napi, worker pools) load when a layer command runs, so that
// `--help` and `--version` do not pay for them.
const openLayer = async (
  ...a: Parameters<typeof import('../format/open-layer.js').openLayer>
): Promise<LayerIndex> => (await import('../format/open-layer.js')).openLayer(...a);

export interface InspectEntry {
  name: string;
  type: TreeNode['type'] | 'hardlink';
  id: number;
  size: number;
  mode: number;
  uid: number;
  gid: number;
  uname: string | null;
  gname: string | null;
  mtime: number;
  linkName: string;
  devMajor: number;
  devMinor: number;
  nlink: number;
  /** Values in standard base64. */
  xattrs: Record<string, string>;
  digest: string | null;
  chunks: TreeNode['chunks'];
}

export interface InspectResult {
  format: LayerIndex['format'];
  tocDigest: string;
  tocJsonDigest: string;
  manifestChecksum?: string;
  tocOffset: number;
  dataEnd: number;
  blobSize: number;
  prefetch: LayerIndex['prefetch'];
  entries: InspectEntry[];
}

function entryOf(name: string, node: TreeNode, hardlinkTo?: string): InspectEntry {
  const xattrs: Record<string, string> = {};
  for (const [k, v] of [...node.xattrs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    xattrs[k] = v.toString('base64');
  }
  return {
    name,
    type: hardlinkTo === undefined ? node.type : 'hardlink',
    id: node.id,
    size: hardlinkTo === undefined ? node.size : 0,
    mode: node.mode,
    uid: node.uid,
    gid: node.gid,
    uname: node.uname ?? null,
    gname: node.gname ?? null,
    mtime: node.mtime,
    linkName: hardlinkTo ?? node.linkName,
    devMajor: node.devMajor,
    devMinor: node.devMinor,
    nlink: node.nlink,
    xattrs,
    digest: hardlinkTo === undefined ? (node.digest ?? null) : null,
    chunks: hardlinkTo === undefined ? node.chunks : [],
  };
}

/**
 * Deterministic walk: the root, then depth-first with children sorted by name. The name at
 * which a shared node was created (its `path`) shows the file; every other name is listed as
 * type 'hardlink' with linkName = that path.
 */
export function inspectLayer(index: LayerIndex): InspectResult {
  const entries: InspectEntry[] = [entryOf('', index.root)];
  const visit = (dir: TreeNode, prefix: string): void => {
    const names = [...dir.children!.keys()].sort();
    for (const name of names) {
      const child = dir.children!.get(name)!;
      const path = prefix === '' ? name : `${prefix}/${name}`;
      if (child.path !== path) {
        entries.push(entryOf(path, child, child.path));
        continue;
      }
      entries.push(entryOf(path, child));
      if (child.type === 'dir') visit(child, path);
    }
  };
  visit(index.root, '');
  return {
    format: index.format,
    tocDigest: index.tocDigest,
    tocJsonDigest: index.tocJsonDigest,
    ...(index.manifestChecksum !== undefined ? { manifestChecksum: index.manifestChecksum } : {}),
    tocOffset: index.tocOffset,
    dataEnd: index.dataEnd,
    blobSize: index.blobSize,
    prefetch: index.prefetch,
    entries,
  };
}

async function writeOut(data: string | Buffer): Promise<void> {
  if (!process.stdout.write(data)) await once(process.stdout, 'drain');
}

async function withBlob<T>(blob: string, fn: (reader: FileRangeReader) => Promise<T>): Promise<T> {
  let reader: FileRangeReader;
  try {
    const { FileRangeReader } = await import('../util/range-reader.js');
    reader = await FileRangeReader.open(blob);
  } catch (err) {
    throw new StoreError('E_IO', `cannot open ${blob}: ${(err as Error).message}`, { path: blob });
  }
  try {
    return await fn(reader);
  } finally {
    await reader.close();
  }
}

interface DigestOption {
  tocDigest?: string;
}

/** `--toc-digest` must be an `algorithm:hex` digest (e.g. sha256:<64 hex>), checked before any I/O. */
export function parseTocDigest(value: string): string {
  if (!isValidDigest(value)) {
    throw new StoreError(
      'E_INVALID_ARGUMENT',
      `--toc-digest must be a digest like sha256:<64 lowercase hex digits>, got '${value}'`,
    );
  }
  return value;
}

function parseChunkSize(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new StoreError('E_INVALID_ARGUMENT', `--chunk-size must be a positive integer, got ${value}`);
  }
  return n;
}

export function registerLayerCommands(program: Command): void {
  const layer = program
    .command('layer')
    .description('inspect, read and build eStargz / zstd:chunked layer blobs');

  layer
    .command('inspect <blob>')
    .description('print the layer format, TOC digests and every entry as JSON')
    .option('--toc-digest <digest>', 'fail unless the TOC has this digest', parseTocDigest)
    .action(async (blob: string, opts: DigestOption) => {
      const result = await withBlob(blob, async (reader) => {
        const index = await openLayer(reader, opts.tocDigest ? { expectedTocDigest: opts.tocDigest } : {});
        return inspectLayer(index);
      });
      await writeOut(JSON.stringify(result, null, 2) + '\n');
    });

  layer
    .command('cat <blob> <path>')
    .description('write the bytes of a regular file to stdout (every chunk verified)')
    .option('--toc-digest <digest>', 'fail unless the TOC has this digest', parseTocDigest)
    .action(async (blob: string, path: string, opts: DigestOption) => {
      await withBlob(blob, async (reader) => {
        const index = await openLayer(reader, opts.tocDigest ? { expectedTocDigest: opts.tocDigest } : {});
        const [{ lookupPath }, { readFileRange }] = await Promise.all([
          import('../format/model.js'),
          import('../format/read-file.js'),
        ]);
        const node = lookupPath(index, path);
        if (node === undefined)
          throw new StoreError('E_NOT_FOUND', `no such file in layer: ${path}`, { path });
        if (node.type !== 'reg') {
          const what = node.type === 'symlink' ? `a symlink to ${node.linkName}` : `a ${node.type}`;
          throw new StoreError('E_INVALID_ARGUMENT', `${path} is ${what}, not a regular file`, { path });
        }
        // chunk by chunk: memory stays at one chunk, each verified before it is written
        for (const chunk of node.chunks) {
          await writeOut(await readFileRange(reader, index, node, chunk.fileOffset, chunk.size));
        }
      });
    });

  layer
    .command('build <tar> <out>')
    .description('convert a tar (plain, gzip or zstd) into an eStargz or zstd:chunked blob; prints JSON')
    .option('--format <format>', 'estargz or zstd:chunked', 'estargz')
    .option('--chunk-size <bytes>', 'uncompressed bytes per chunk (default 4 MiB)')
    .option(
      '--prioritize <path>',
      'file to place first, before the prefetch landmark (repeatable)',
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .action(
      async (
        tar: string,
        out: string,
        opts: { format: string; chunkSize?: string; prioritize: string[] },
      ) => {
        if (opts.format !== 'estargz' && opts.format !== 'zstd:chunked') {
          throw new StoreError(
            'E_INVALID_ARGUMENT',
            `--format must be estargz or zstd:chunked, got ${opts.format}`,
          );
        }
        const chunkSize = opts.chunkSize !== undefined ? parseChunkSize(opts.chunkSize) : undefined;
        // On a terminal: bytes written to <out> so far (the writer has no progress hook yet).
        const progress = startProgress(`layer build ${opts.format}`);
        const timer = setInterval(() => {
          void stat(out).then(
            (st) => progress.update(st.size),
            () => undefined,
          );
        }, 200);
        let result;
        try {
          const { buildLayerToFile } = await import('../format/writer/index.js');
          result = await buildLayerToFile(tar, out, {
            format: opts.format,
            ...(chunkSize !== undefined ? { chunkSize } : {}),
            ...(opts.prioritize.length > 0 ? { prioritize: opts.prioritize } : {}),
          });
        } finally {
          clearInterval(timer);
          progress.stop();
        }
        await writeOut(JSON.stringify(result, null, 2) + '\n');
      },
    );
}
