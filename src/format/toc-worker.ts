/**
 * Big TOCs (tens of MB of JSON) are prepared on a worker thread so the main thread, which serves
 * FUSE, never stalls on them: for eStargz the worker also inflates the TOC member and checks its
 * CRC32/ISIZE; it hashes and JSON.parse's the TOC, re-serialises each entry separately and hands
 * all entries back as one transferred UTF-8 buffer (no copy). The main thread then parses
 * entries one by one in slices (toc.ts), giving the event loop a turn in between.
 */
import { Worker } from 'node:worker_threads';
import { StoreError, type ErrorCode } from '../util/errors.js';
import { transferableCopy } from './transfer.js';
import type { TocJsonLocation } from './estargz/toc-member.js';
import { prepareTocInline, type PreparedToc } from './toc.js';

/** JSON below this size is parsed inline: a worker costs more than it saves. */
export const OFF_THREAD_THRESHOLD = 1 << 20;
/** Compressed eStargz TOC members from this size on are inflated on the worker as well. */
export const OFF_THREAD_MEMBER_THRESHOLD = 128 * 1024;

/**
 * Worker source (CommonJS, evaluated; works from the .ts sources under vitest and from dist/).
 * workerData: { input: ArrayBuffer, maxEntries, gzip?: TocJsonLocation }
 *   without `gzip`, input is the JSON; with it, input is the gzip TOC member and the JSON is
 *   [bodyStart, bodyStart + bodySize) of its decompressed tar stream.
 * reply: { ok: true, jsonDigest, version, tarSplitDigest, entriesKind, count, text?, bounds? }
 *      | { ok: false, code, message }
 * `text` (ArrayBuffer, transferred) holds every entry as UTF-8 JSON back to back; entry i is
 * bytes [bounds[i], bounds[i+1]). Non-finite numbers (1e400) cannot round-trip through JSON, so
 * they become a marker string that the main thread's type checks reject, as they would reject
 * the number itself.
 */
const SOURCE = String.raw`
'use strict';
(function main() {
const { parentPort, workerData } = require('node:worker_threads');
const crypto = require('node:crypto');
const zlib = require('node:zlib');
const fail = (code, message) => parentPort.postMessage({ ok: false, code, message });
const input = Buffer.from(workerData.input);
let buf = input;
const g = workerData.gzip;
if (g) {
  // exactly one member: raw inflate from the header on, then the 8-byte trailer must match
  let r;
  try {
    r = zlib.inflateRawSync(input.subarray(g.headerLength), { info: true, maxOutputLength: g.maxOutput, chunkSize: 1 << 20 });
  } catch (err) {
    if (err && err.code === 'ERR_BUFFER_TOO_LARGE') {
      return fail('E_TOC_TOO_LARGE', 'decompressed data exceeds the limit of ' + g.maxOutput + ' bytes');
    }
    return fail('E_BAD_TOC', 'cannot inflate gzip data: ' + ((err && err.message) || err));
  }
  const data = r.buffer;
  const trailerAt = g.headerLength + r.engine.bytesWritten;
  if (trailerAt + 8 > input.length) return fail('E_BAD_TOC', 'gzip member is truncated (no trailer)');
  if (zlib.crc32(data) !== input.readUInt32LE(trailerAt) || data.length % 4294967296 !== input.readUInt32LE(trailerAt + 4)) {
    return fail('E_BAD_TOC', 'gzip member trailer (CRC32/ISIZE) does not match its data');
  }
  if (g.bodyStart + g.bodySize > data.length) return fail('E_BAD_TOC', 'TOC tar entry body is truncated');
  buf = data.subarray(g.bodyStart, g.bodyStart + g.bodySize);
}
const jsonDigest = 'sha256:' + crypto.createHash('sha256').update(buf).digest('hex');
let doc;
try {
  doc = JSON.parse(buf.toString('utf8'));
} catch (err) {
  return fail('E_BAD_TOC', 'TOC is not valid JSON: ' + err.message);
}
buf = null;
if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
  return fail('E_BAD_TOC', 'TOC is not a JSON object');
}
let entries = null, version, tarSplitDigest;
for (const key of Object.keys(doc)) {
  const k = key.toLowerCase();
  if (k === 'entries') entries = doc[key];
  else if (k === 'version') version = doc[key];
  else if (k === 'tarsplitdigest') tarSplitDigest = doc[key];
}
const isArray = Array.isArray(entries);
const entriesKind = isArray ? 'array' : entries === null || entries === undefined ? 'absent' : 'invalid';
const count = isArray ? entries.length : 0;
const reply = { ok: true, jsonDigest, version, tarSplitDigest, entriesKind, count };
if (!isArray || count > workerData.maxEntries) {
  parentPort.postMessage(reply);
  return;
}
doc = null;
const replacer = (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? '\u0000non-finite' : v);
const bounds = new Float64Array(count + 1);
// own (unpooled) memory, grown by doubling, so it can be transferred without a copy
let out = Buffer.allocUnsafeSlow(Math.max(4096, input.length));
let pos = 0;
for (let i = 0; i < count; i++) {
  const s = JSON.stringify(entries[i], replacer);
  entries[i] = null;
  const max = s.length * 3;
  if (pos + max > out.length) {
    const bigger = Buffer.allocUnsafeSlow(Math.max(out.length * 2, pos + max));
    out.copy(bigger, 0, 0, pos);
    out = bigger;
  }
  bounds[i] = pos;
  pos += out.write(s, pos, 'utf8');
}
bounds[count] = pos;
reply.text = out.buffer;
reply.bounds = bounds;
parentPort.postMessage(reply, [out.buffer, bounds.buffer]);
})();
`;

interface Reply {
  ok: boolean;
  code?: ErrorCode;
  message?: string;
  jsonDigest?: string;
  version?: unknown;
  tarSplitDigest?: unknown;
  entriesKind?: PreparedToc['entriesKind'];
  count?: number;
  text?: ArrayBuffer;
  bounds?: Float64Array;
}

async function runWorker(
  input: Uint8Array,
  extra: { maxEntries: number; gzip?: TocJsonLocation },
  signal: AbortSignal | undefined,
): Promise<PreparedToc> {
  const ab = await transferableCopy(input);
  if (signal?.aborted) throw new StoreError('E_ABORTED', 'aborted while parsing the TOC');
  const reply = await new Promise<Reply>((resolve, reject) => {
    const worker = new Worker(SOURCE, {
      eval: true,
      workerData: { input: ab, ...extra },
      transferList: [ab],
      name: 'stargz-toc',
    });
    let done = false;
    const finish = (fn: () => void): void => {
      if (done) return;
      done = true;
      signal?.removeEventListener('abort', onAbort);
      void worker.terminate();
      fn();
    };
    const onAbort = (): void =>
      finish(() => reject(new StoreError('E_ABORTED', 'aborted while parsing the TOC')));
    signal?.addEventListener('abort', onAbort, { once: true });
    worker.once('message', (msg: Reply) => finish(() => resolve(msg)));
    worker.once('error', (err: Error) =>
      finish(() =>
        reject(new StoreError('E_BAD_TOC', `TOC parser worker failed: ${err.message}`, {}, { cause: err })),
      ),
    );
    worker.once('exit', (code) =>
      finish(() =>
        reject(new StoreError('E_BAD_TOC', `TOC parser worker exited (${code}) without a result`)),
      ),
    );
  });
  if (!reply.ok) {
    const limit = reply.code === 'E_TOC_TOO_LARGE' && extra.gzip ? { limit: extra.gzip.maxOutput } : {};
    throw new StoreError(reply.code ?? 'E_BAD_TOC', reply.message ?? 'TOC parser failed', limit);
  }
  const { bounds } = reply;
  const text = reply.text !== undefined ? Buffer.from(reply.text) : undefined;
  return {
    jsonDigest: reply.jsonDigest!,
    version: reply.version,
    tarSplitDigest: reply.tarSplitDigest,
    entriesKind: reply.entriesKind!,
    count: reply.count!,
    entry: (i: number): unknown => {
      if (text === undefined || bounds === undefined) {
        throw new StoreError('E_BAD_TOC', 'TOC entries not available');
      }
      return JSON.parse(text.toString('utf8', bounds[i], bounds[i + 1]));
    },
  };
}

/** Hash and parse TOC JSON on a worker thread. Throws E_BAD_TOC / E_ABORTED. */
export async function prepareTocOffThread(
  json: Buffer,
  opts: { maxEntries: number; signal?: AbortSignal },
): Promise<PreparedToc> {
  return await runWorker(json, { maxEntries: opts.maxEntries }, opts.signal);
}

/**
 * Inflate an eStargz TOC member (exactly one gzip member, CRC32/ISIZE checked), take the JSON at
 * `location` and prepare it, all on a worker thread. Throws E_BAD_TOC / E_TOC_TOO_LARGE /
 * E_ABORTED.
 */
export async function prepareEStargzTocOffThread(
  member: Buffer,
  location: TocJsonLocation,
  opts: { maxEntries: number; signal?: AbortSignal },
): Promise<PreparedToc> {
  const gzip: TocJsonLocation = {
    headerLength: location.headerLength,
    bodyStart: location.bodyStart,
    bodySize: location.bodySize,
    maxOutput: location.maxOutput,
  };
  return await runWorker(member, { maxEntries: opts.maxEntries, gzip }, opts.signal);
}

/** Prepare a TOC for parsing: inline when small, on a worker thread when big. */
export async function prepareToc(
  json: Buffer,
  opts: { maxEntries: number; signal?: AbortSignal },
): Promise<PreparedToc> {
  return json.length < OFF_THREAD_THRESHOLD ? prepareTocInline(json) : await prepareTocOffThread(json, opts);
}
