import { createReadStream } from 'node:fs';
import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, pipeline, type Transform } from 'node:stream';
import { createGunzip, gunzip } from 'node:zlib';
import { promisify } from 'node:util';
import { createRequire } from 'node:module';
import { StoreError, asStoreError } from '../../util/errors.js';
import { BufferRangeReader, FileRangeReader, type RangeReader } from '../../util/range-reader.js';
import { readTar, type TarEntry } from './tar-reader.js';

const require = createRequire(import.meta.url);
const zstd = require('zstd-napi') as {
  decompress(buf: Uint8Array): Buffer;
  DecompressStream: new () => Transform;
};
const gunzipAsync = promisify(gunzip);

export type TarInput = AsyncIterable<Buffer | Uint8Array | string> | NodeJS.ReadableStream;

/** A parsed input tar: its entries and random access to payload bytes at `entry.dataOffset`. */
export interface TarSource {
  entries: TarEntry[];
  payload: RangeReader;
  close(): Promise<void>;
}

type Compression = 'gzip' | 'zstd' | 'none';

function sniff(head: Buffer): Compression {
  if (head.length >= 3 && head[0] === 0x1f && head[1] === 0x8b && head[2] === 0x08) return 'gzip';
  if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528) return 'zstd';
  return 'none';
}

async function collect(
  source: AsyncIterable<Buffer | Uint8Array | string> | Iterable<Buffer>,
): Promise<TarEntry[]> {
  const out: TarEntry[] = [];
  const iterable =
    Symbol.asyncIterator in source
      ? source
      : (async function* () {
          yield* source;
        })();
  try {
    for await (const e of readTar(iterable)) out.push(e);
  } catch (err) {
    throw asStoreError(err, 'E_IO'); // a failing input stream, not a tar problem
  }
  return out;
}

/** In-memory input (tests, small layers). */
export async function openTarBuffer(buf: Buffer): Promise<TarSource> {
  let tar = buf;
  try {
    const kind = sniff(buf);
    if (kind === 'gzip') tar = await gunzipAsync(buf);
    else if (kind === 'zstd') tar = zstd.decompress(buf);
  } catch (err) {
    throw asStoreError(err, 'E_DECOMPRESS');
  }
  const entries = await collect([tar]);
  return { entries, payload: new BufferRangeReader(tar), close: async () => {} };
}

/** Split off the first bytes of a stream (to sniff compression) without losing them. */
async function peek(
  source: AsyncIterable<Buffer | Uint8Array | string>,
  n: number,
): Promise<{ head: Buffer; stream: AsyncIterable<Buffer> }> {
  const it = source[Symbol.asyncIterator]();
  const taken: Buffer[] = [];
  let len = 0;
  let done = false;
  while (len < n) {
    const next = await it.next();
    if (next.done) {
      done = true;
      break;
    }
    const v = next.value;
    const b = typeof v === 'string' ? Buffer.from(v) : Buffer.isBuffer(v) ? v : Buffer.from(v);
    taken.push(b);
    len += b.length;
  }
  const head = Buffer.concat(taken);
  async function* rest(): AsyncGenerator<Buffer> {
    if (head.length > 0) yield head;
    if (done) return;
    while (true) {
      const next = await it.next();
      if (next.done) return;
      const v = next.value;
      yield typeof v === 'string' ? Buffer.from(v) : Buffer.isBuffer(v) ? v : Buffer.from(v);
    }
  }
  return { head, stream: rest() };
}

function decompressStream(kind: Compression, src: AsyncIterable<Buffer>): AsyncIterable<Buffer> {
  if (kind === 'none') return src;
  const t: Transform = kind === 'gzip' ? createGunzip() : new zstd.DecompressStream();
  pipeline(Readable.from(src), t, () => {
    /* errors surface through iteration of `t` */
  });
  return (async function* () {
    try {
      for await (const c of t) yield c as Buffer;
    } catch (err) {
      throw err instanceof StoreError
        ? err
        : new StoreError('E_DECOMPRESS', `cannot decompress input: ${(err as Error).message}`);
    }
  })();
}

/**
 * Streaming input: decompressed on the fly and spooled to a temporary file while the headers are
 * parsed, so a multi-GiB tar never sits in memory; payloads are then read back from the spool.
 */
export async function openTarStream(input: TarInput): Promise<TarSource> {
  const source = input as AsyncIterable<Buffer | Uint8Array | string>;
  const { head, stream } = await peek(source, 4);
  const tar = decompressStream(sniff(head), stream);
  const dir = await mkdtemp(join(tmpdir(), 'sgz-build-'));
  const spoolPath = join(dir, 'input.tar');
  const cleanup = async (): Promise<void> => {
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const fh = await open(spoolPath, 'w');
    let entries: TarEntry[];
    try {
      async function* tee(): AsyncGenerator<Buffer> {
        for await (const chunk of tar) {
          await fh.write(chunk);
          yield chunk;
        }
      }
      entries = await collect(tee());
    } finally {
      await fh.close();
    }
    const payload = await FileRangeReader.open(spoolPath);
    return {
      entries,
      payload,
      close: async () => {
        await payload.close();
        await cleanup();
      },
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** A tar file on disk: plain tars are read in place, compressed ones go through the spool. */
export async function openTarFile(path: string): Promise<TarSource> {
  const fh = await open(path, 'r').catch((err: unknown) => {
    throw asStoreError(err, 'E_IO', { path });
  });
  let head: Buffer;
  try {
    const b = Buffer.alloc(4);
    const { bytesRead } = await fh.read(b, 0, 4, 0);
    head = b.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
  if (sniff(head) !== 'none') return openTarStream(createReadStream(path));
  const entries = await collect(createReadStream(path, { highWaterMark: 1 << 20 }));
  const payload = await FileRangeReader.open(path);
  return { entries, payload, close: () => payload.close() };
}
