/**
 * Source of the codec worker, evaluated with `new Worker(src, { eval: true })` (CommonJS, so
 * `require` exists). Kept as a string so it works both when vitest runs the .ts sources and
 * from dist/ — there is no separate worker file to locate.
 *
 * Protocol (one message per task, replies carry the same id):
 *   { id, op: 'decode', codec: 'gzip'|'zstd', src: ArrayBuffer[], innerOffset, size, digest }
 *     -> { id, ok: true, data: ArrayBuffer, byteOffset, length }           (verified bytes)
 *   { id, op: 'zeros', size, digest } -> { id, ok: true }                  (digest checked)
 *   { id, op: 'sha256', src: ArrayBuffer[] } -> { id, ok: true, digest }
 * `src` is the input in slices (the main thread copies big inputs piecewise, yielding between).
 *   failures -> { id, ok: false, kind: 'decompress'|'truncated'|'mismatch', message, actual? }
 */
export const CODEC_WORKER_SOURCE = String.raw`
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const zlib = require('node:zlib');
const crypto = require('node:crypto');
const zstd = require(workerData.zstdBinding);

let dctx = null;
const MAX_DEFLATE_RATIO = 1032;

function sha256(buf) {
  return 'sha256:' + crypto.createHash('sha256').update(buf).digest('hex');
}

// Decode only as far as needed: stop once innerOffset + size bytes exist (frames usually hold
// exactly one chunk, but the stargz zstd flavour appends tar headers after it).
function zstdPrefix(src, need) {
  if (dctx === null) dctx = new zstd.DCtx();
  dctx.reset(zstd.ResetDirective.sessionOnly);
  const out = Buffer.allocUnsafe(need);
  let produced = 0;
  let consumed = 0;
  while (produced < need && consumed < src.length) {
    const r = dctx.decompressStream(out.subarray(produced), src.subarray(consumed));
    produced += r[1];
    consumed += r[2];
    if (r[1] === 0 && r[2] === 0) break;
  }
  return out.subarray(0, produced);
}

// A gzip member holds one chunk plus the following tar headers, so decoding the whole span costs
// little; the output bound is the largest ratio deflate can reach, so a lying span cannot balloon.
function gunzipSpan(src, need) {
  const limit = Math.min(require('node:buffer').constants.MAX_LENGTH, need + MAX_DEFLATE_RATIO * src.length + 65536);
  // zlib's default 16 KiB output step makes inflate ~2.5x slower on MiB-sized chunks.
  return zlib.gunzipSync(src, { maxOutputLength: limit, chunkSize: 1 << 20 });
}

function fail(id, kind, message, actual) {
  parentPort.postMessage({ id, ok: false, kind, message, actual });
}

parentPort.on('message', (m) => {
  const id = m.id;
  try {
    if (m.op === 'sha256') {
      const h = crypto.createHash('sha256');
      for (const ab of m.src) h.update(new Uint8Array(ab));
      parentPort.postMessage({ id, ok: true, digest: 'sha256:' + h.digest('hex') });
      return;
    }
    if (m.op === 'zeros') {
      const actual = sha256(Buffer.alloc(m.size));
      if (actual !== m.digest) return fail(id, 'mismatch', 'digest mismatch', actual);
      parentPort.postMessage({ id, ok: true });
      return;
    }
    const src = m.src.length === 1 ? Buffer.from(m.src[0]) : Buffer.concat(m.src.map((ab) => new Uint8Array(ab)));
    const need = m.innerOffset + m.size;
    let plain;
    try {
      plain = m.codec === 'gzip' ? gunzipSpan(src, need) : zstdPrefix(src, need);
    } catch (err) {
      return fail(id, 'decompress', String((err && err.message) || err));
    }
    if (plain.length < need) {
      return fail(id, 'truncated', 'decompressed ' + plain.length + ' bytes, need ' + need);
    }
    const data = plain.subarray(m.innerOffset, need);
    const actual = sha256(data);
    if (actual !== m.digest) return fail(id, 'mismatch', 'digest mismatch', actual);
    // Transfer without copying when the result owns its ArrayBuffer; pooled slabs must be copied.
    let ab = data.buffer;
    let byteOffset = data.byteOffset;
    if (ab.byteLength !== plain.length || plain.byteOffset !== 0) {
      ab = new ArrayBuffer(data.length);
      new Uint8Array(ab).set(data);
      byteOffset = 0;
    }
    parentPort.postMessage({ id, ok: true, data: ab, byteOffset, length: data.length }, [ab]);
  } catch (err) {
    fail(id, 'decompress', String((err && err.message) || err));
  }
});
`;
