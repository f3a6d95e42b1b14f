/**
 * Big TOCs (tens of MB of JSON) are hashed and JSON.parse'd on a worker thread so the main
 * thread, which serves FUSE, never stalls for the whole parse. The worker re-serialises each
 * entry separately; the main thread then parses entries one by one in slices (toc.ts), giving
 * the event loop a turn in between.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import { StoreError } from '../util/errors.js';
import { prepareTocInline, type PreparedToc } from './toc.js';

/** JSON below this size is parsed inline: a worker costs more than it saves. */
export const OFF_THREAD_THRESHOLD = 1 << 20;

/**
 * Worker source (CommonJS, evaluated; works from the .ts sources under vitest and from dist/).
 * workerData: { json: ArrayBuffer, maxEntries }
 * reply: { ok: true, jsonDigest, version, tarSplitDigest, entriesKind, count, text?, bounds? }
 *      | { ok: false, message }
 * `text` holds every entry as JSON back to back; entry i is text[bounds[i], bounds[i+1]).
 * Non-finite numbers (1e400) cannot round-trip through JSON, so they become a marker string
 * that the main thread's type checks reject, as they would reject the number itself.
 */
const SOURCE = String.raw`
'use strict';
(function main() {
const { parentPort, workerData } = require('node:worker_threads');
const crypto = require('node:crypto');
const buf = Buffer.from(workerData.json);
const jsonDigest = 'sha256:' + crypto.createHash('sha256').update(buf).digest('hex');
let doc;
try {
  doc = JSON.parse(buf.toString('utf8'));
} catch (err) {
  parentPort.postMessage({ ok: false, message: 'TOC is not valid JSON: ' + err.message });
  return;
}
if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
  parentPort.postMessage({ ok: false, message: 'TOC is not a JSON object' });
  return;
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
if (isArray && count <= workerData.maxEntries) {
  const replacer = (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? '\u0000non-finite' : v);
  const parts = new Array(count);
  const bounds = new Float64Array(count + 1);
  let pos = 0;
  for (let i = 0; i < count; i++) {
    const s = JSON.stringify(entries[i], replacer);
    parts[i] = s;
    bounds[i] = pos;
    pos += s.length;
  }
  bounds[count] = pos;
  entries = null;
  doc = null;
  reply.text = parts.join('');
  reply.bounds = bounds;
  parentPort.postMessage(reply, [bounds.buffer]);
} else {
  parentPort.postMessage(reply);
}
})();
`;

interface Reply {
  ok: boolean;
  message?: string;
  jsonDigest?: string;
  version?: unknown;
  tarSplitDigest?: unknown;
  entriesKind?: PreparedToc['entriesKind'];
  count?: number;
  text?: string;
  bounds?: Float64Array;
}

/** Copy into a transferable buffer in 1 MiB steps, yielding between them. */
async function transferable(buf: Buffer): Promise<ArrayBuffer> {
  const ab = new ArrayBuffer(buf.length);
  const view = new Uint8Array(ab);
  const step = 1 << 20;
  for (let off = 0; off < buf.length; off += step) {
    if (off > 0) await yieldToLoop();
    view.set(buf.subarray(off, Math.min(buf.length, off + step)), off);
  }
  return ab;
}

export async function prepareTocOffThread(
  json: Buffer,
  opts: { maxEntries: number; signal?: AbortSignal },
): Promise<PreparedToc> {
  const ab = await transferable(json);
  if (opts.signal?.aborted) throw new StoreError('E_ABORTED', 'aborted while parsing the TOC');
  const reply = await new Promise<Reply>((resolve, reject) => {
    const worker = new Worker(SOURCE, {
      eval: true,
      workerData: { json: ab, maxEntries: opts.maxEntries },
      transferList: [ab],
    });
    let done = false;
    const finish = (fn: () => void): void => {
      if (done) return;
      done = true;
      opts.signal?.removeEventListener('abort', onAbort);
      void worker.terminate();
      fn();
    };
    const onAbort = (): void =>
      finish(() => reject(new StoreError('E_ABORTED', 'aborted while parsing the TOC')));
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    worker.once('message', (msg: Reply) => finish(() => resolve(msg)));
    worker.once('error', (err: Error) =>
      finish(() => reject(new StoreError('E_BAD_TOC', `TOC parser worker failed: ${err.message}`))),
    );
    worker.once('exit', (code) =>
      finish(() =>
        reject(new StoreError('E_BAD_TOC', `TOC parser worker exited (${code}) without a result`)),
      ),
    );
  });
  if (!reply.ok) throw new StoreError('E_BAD_TOC', reply.message ?? 'TOC parser failed');
  const { text, bounds } = reply;
  return {
    jsonDigest: reply.jsonDigest!,
    version: reply.version,
    tarSplitDigest: reply.tarSplitDigest,
    entriesKind: reply.entriesKind!,
    count: reply.count!,
    entry: (i: number): unknown => {
      if (text === undefined || bounds === undefined)
        throw new StoreError('E_BAD_TOC', 'TOC entries not available');
      return JSON.parse(text.slice(bounds[i], bounds[i + 1]));
    },
  };
}

/** Prepare a TOC for parsing: inline when small, on a worker thread when big. */
export async function prepareToc(
  json: Buffer,
  opts: { maxEntries: number; signal?: AbortSignal },
): Promise<PreparedToc> {
  return json.length < OFF_THREAD_THRESHOLD ? prepareTocInline(json) : await prepareTocOffThread(json, opts);
}
