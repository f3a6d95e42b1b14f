import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import tarStream from 'tar-stream';
import { expect } from 'vitest';
import { StoreError } from '../../src/util/errors.js';
import { BufferRangeReader } from '../../src/util/range-reader.js';

export { SHARED } from './shared.js';
import { SHARED } from './shared.js';
import type { Digest } from '../../src/util/digest.js';
export const VECTOR_A = join(SHARED, 'vectors/vector-a-estargz-gzip9-chunk4-prio.blob');
export const VECTOR_B = join(SHARED, 'vectors/vector-b-zstdchunked-chunk4.blob');
export const SAMPLES_TINY = join(SHARED, 'samples/tiny');

export function sha256(data: Uint8Array | string): Digest {
  return ('sha256:' + createHash('sha256').update(data).digest('hex')) as Digest;
}

/** The StoreError `p` rejects with (fails the test if it resolves or throws anything else). */
export async function failure(p: Promise<unknown>): Promise<StoreError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreError);
  return err as StoreError;
}

export async function loadBlob(path: string): Promise<{ buf: Buffer; reader: BufferRangeReader }> {
  const buf = await readFile(path);
  return { buf, reader: new BufferRangeReader(buf) };
}

/** A reader that counts requests (to check how many ranges openLayer reads). */
export class CountingReader extends BufferRangeReader {
  readonly requests: Array<[offset: number, length: number]> = [];
  override async read(offset: number, length: number): Promise<Buffer> {
    this.requests.push([offset, length]);
    return await super.read(offset, length);
  }
}

/**
 * Run a system tool; a missing tool or non-zero exit FAILS (tests never silently skip).
 * Returns stdout as a Buffer.
 */
export async function run(
  cmd: string,
  args: string[],
  opts: { stdin?: Buffer; cwd?: string } = {},
): Promise<Buffer> {
  return await new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', (e) => reject(new Error(`cannot run ${cmd} (is it installed?): ${e.message}`)));
    child.on('close', (code) => {
      if (code === 0) resolve(Buffer.concat(out));
      else reject(new Error(`${cmd} ${args.join(' ')} exited ${code}: ${Buffer.concat(err).toString()}`));
    });
    child.stdin.on('error', () => {}); // the tool may exit before reading everything
    child.stdin.end(opts.stdin ?? Buffer.alloc(0));
  });
}

export interface TarMember {
  name: string;
  type: string;
  linkname?: string;
  data: Buffer;
}

/**
 * Read an uncompressed tar with tar-stream (not the store's own tar code), so unit tests can list
 * and extract archives without a system `tar`. Stops at the end-of-archive blocks like `tar -t`.
 */
export async function readTar(tar: Buffer): Promise<TarMember[]> {
  const members: TarMember[] = [];
  const extract = tarStream.extract();
  for await (const entry of Readable.from([tar]).pipe(extract)) {
    const parts: Buffer[] = [];
    for await (const d of entry) parts.push(d as Buffer);
    const h = entry.header;
    members.push({
      name: h.name,
      type: h.type ?? 'file',
      ...(h.linkname ? { linkname: h.linkname } : {}),
      data: Buffer.concat(parts),
    });
  }
  return members;
}
