/**
 * Source of the codec worker, evaluated with `new Worker(src, { eval: true })` (CommonJS, so
 * `require` exists). Kept as a string so it works both when vitest runs the .ts sources and
 * from dist/ — there is no separate worker file to locate.
 *
 * Protocol (one message per task, replies carry the same id):
 *   { id, op: 'decode', codec: 'gzip'|'zstd', src: ArrayBuffer[], innerOffset, size, digest }
 *     -> { id, ok: true, data: ArrayBuffer, byteOffset, length }           (verified bytes)
 *   { id, op: 'decodeMany', codec, src, chunks: [{ innerOffset, size, digest }] }
 *     -> { id, ok: true, results: [{ ok: true, data, byteOffset, length } | failure] }
 *   { id, op: 'zeros', size, digest } -> { id, ok: true }                  (digest checked)
 *   { id, op: 'sha256', src: ArrayBuffer[] } -> { id, ok: true, digest }
 * `src` is the input in slices (the main thread copies big inputs piecewise, yielding between).
 *   failures -> { id, ok: false, kind: 'decompress'|'truncated'|'mismatch', message, actual? }
 * Tasks may overlap inside one worker (zeros hashing and the gzip fallback are asynchronous), so
 * a long zeros check never holds up a decode queued behind it for more than one hashing step.
 */
export const CODEC_WORKER_SOURCE = String.raw`
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const zlib = require('node:zlib');
const crypto = require('node:crypto');
const zstd = require(workerData.zstdBinding);

let dctx = null;

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

// A gzip member holds its chunk plus a few trailing tar headers, so the common case inflates the
// whole span synchronously, capped at need + GZIP_SLACK. Beyond the cap (a member shared by many
// small files, a long run of header-only entries, or a bomb) the bounded stream below takes over;
// so it does for big needs, where a failed synchronous attempt would waste as much again.
const GZIP_SLACK = 256 * 1024;
// Each output step is a fresh buffer that lives until the next GC, and Node 24 collects them later
// than Node 20 did: a 70 MiB need grew RSS by 134 MiB at 256 KiB steps, by ~100 MiB at 16 KiB
// (zlib's default), for about the same inflate time.
const GZIP_STEP = 16 * 1024;
const SYNC_NEED_LIMIT = 16 << 20;

// Offset of the deflate data of the gzip member at the start of src (RFC 1952 header). Members
// are inflated raw, one at a time, and the next member is only touched while the chunk still
// needs bytes: the bytes after the member that completes a chunk belong to other files (maybe a
// broken member a hostile TOC points into) and must never fail it. zlib's gunzip would go on
// into any following member and fail on its neighbour's damage.
function gzipBodyOffset(src) {
  if (src.length < 10 || src[0] !== 0x1f || src[1] !== 0x8b) throw new Error('not a gzip member (bad magic)');
  if (src[2] !== 8) throw new Error('unknown gzip compression method ' + src[2]);
  const flags = src[3];
  if (flags & 0xe0) throw new Error('reserved gzip header flags set');
  let pos = 10;
  if (flags & 4) {
    if (pos + 2 > src.length) throw new Error('truncated gzip header');
    pos += 2 + src.readUInt16LE(pos);
  }
  for (const bit of [8, 16]) {
    if (flags & bit) {
      const end = src.indexOf(0, pos);
      if (end < 0) throw new Error('truncated gzip header');
      pos = end + 1;
    }
  }
  if (flags & 2) pos += 2;
  if (pos > src.length) throw new Error('truncated gzip header');
  return pos;
}

// Size of the gzip trailer (CRC32 + ISIZE) after each member's deflate data.
const GZIP_TRAILER = 8;

function gunzipSpanSync(src, need) {
  const parts = [];
  let produced = 0;
  let pos = 0;
  while (produced < need && pos < src.length) {
    const body = pos + gzipBodyOffset(src.subarray(pos));
    let r;
    try {
      // zlib's default 16 KiB output step makes inflate ~2.5x slower on MiB-sized chunks.
      r = zlib.inflateRawSync(src.subarray(body), {
        maxOutputLength: need - produced + GZIP_SLACK,
        chunkSize: 1 << 20,
        info: true,
      });
    } catch (err) {
      if (err && err.code === 'ERR_BUFFER_TOO_LARGE') return null;
      throw err;
    }
    parts.push(r.buffer);
    produced += r.buffer.length;
    pos = body + r.engine.bytesWritten + GZIP_TRAILER;
  }
  return parts.length === 1 ? parts[0] : Buffer.concat(parts);
}

// Inflate one member's deflate data into out from produced, stopping once need bytes exist.
// Resolves { produced, consumed } (consumed: deflate bytes read, when the member ended).
function inflateMemberInto(body, out, produced, need) {
  return new Promise((resolve, reject) => {
    let done = false;
    const gz = zlib.createInflateRaw({ chunkSize: GZIP_STEP });
    const finish = (err, consumed) => {
      if (done) return;
      done = true;
      gz.destroy();
      if (err) reject(err);
      else resolve({ produced, consumed });
    };
    gz.on('data', (d) => {
      const n = Math.min(d.length, need - produced);
      d.copy(out, produced, 0, n);
      produced += n;
      if (produced >= need) finish(null, 0);
    });
    gz.on('error', (err) => finish(err));
    gz.on('end', () => finish(null, gz.bytesWritten));
    gz.end(body);
  });
}

// Inflate until need bytes exist, then stop: memory stays at need + one output step whatever
// the span would expand to.
async function gunzipPrefixStream(src, need) {
  const out = Buffer.allocUnsafe(need);
  let produced = 0;
  let pos = 0;
  while (produced < need && pos < src.length) {
    const body = pos + gzipBodyOffset(src.subarray(pos));
    const r = await inflateMemberInto(src.subarray(body), out, produced, need);
    produced = r.produced;
    pos = body + r.consumed + GZIP_TRAILER;
  }
  return out.subarray(0, produced);
}

async function gunzipPrefix(src, need) {
  const whole = need <= SYNC_NEED_LIMIT ? gunzipSpanSync(src, need) : null;
  return whole !== null ? whole : await gunzipPrefixStream(src, need);
}

// sha256 of size zero bytes: a fixed zero buffer fed repeatedly (never size bytes of memory).
// Hash states are kept every CHECKPOINT bytes so holes of other lengths resume from the nearest
// one, and the worker yields between steps so its other tasks are not held up.
const ZERO = Buffer.alloc(1 << 20);
const CHECKPOINT = 64 << 20;
const zeroStates = [crypto.createHash('sha256')];

async function zerosDigest(size) {
  const k = Math.min(Math.floor(size / CHECKPOINT), zeroStates.length - 1);
  const h = zeroStates[k].copy();
  let pos = k * CHECKPOINT;
  while (pos < size) {
    const n = Math.min(ZERO.length, size - pos);
    h.update(n === ZERO.length ? ZERO : ZERO.subarray(0, n));
    pos += n;
    if (pos % CHECKPOINT === 0) {
      if (pos / CHECKPOINT === zeroStates.length) zeroStates.push(h.copy());
      await new Promise((r) => setImmediate(r));
    }
  }
  return 'sha256:' + h.digest('hex');
}

function fail(id, kind, message, actual) {
  parentPort.postMessage({ id, ok: false, kind, message, actual });
}

function errorText(err) {
  return String((err && err.message) || err);
}

async function decode(m) {
  const id = m.id;
  const src = m.src.length === 1 ? Buffer.from(m.src[0]) : Buffer.concat(m.src.map((ab) => new Uint8Array(ab)));
  const need = m.innerOffset + m.size;
  let plain;
  try {
    plain = m.codec === 'gzip' ? await gunzipPrefix(src, need) : zstdPrefix(src, need);
  } catch (err) {
    return fail(id, 'decompress', errorText(err));
  }
  if (plain.length < need) {
    return fail(id, 'truncated', 'decompressed ' + plain.length + ' bytes, need ' + need);
  }
  const data = plain.subarray(m.innerOffset, need);
  const actual = sha256(data);
  if (actual !== m.digest) return fail(id, 'mismatch', 'digest mismatch', actual);
  // Transfer without copying when the result is most of an ArrayBuffer of its own; pooled slabs
  // and small chunks cut from a long decode (innerOffset) are copied, so the main thread never
  // receives (and keeps alive) a large buffer for a few bytes.
  let ab = data.buffer;
  let byteOffset = data.byteOffset;
  if (ab.byteLength !== plain.length || plain.byteOffset !== 0 || data.length * 1.25 < ab.byteLength) {
    ab = new ArrayBuffer(data.length);
    new Uint8Array(ab).set(data);
    byteOffset = 0;
  }
  parentPort.postMessage({ id, ok: true, data: ab, byteOffset, length: data.length }, [ab]);
}

// Several chunks cut from one compressed member (eStargz small files share members through
// innerOffset): decode the member once, verify and return each chunk separately.
async function decodeMany(m) {
  const id = m.id;
  const src = Buffer.from(m.src[0]);
  let need = 0;
  for (const c of m.chunks) need = Math.max(need, c.innerOffset + c.size);
  let plain;
  try {
    plain = m.codec === 'gzip' ? await gunzipPrefix(src, need) : zstdPrefix(src, need);
  } catch (err) {
    return fail(id, 'decompress', errorText(err));
  }
  const results = [];
  const transfer = [];
  for (const c of m.chunks) {
    const end = c.innerOffset + c.size;
    if (plain.length < end) {
      results.push({ ok: false, kind: 'truncated', message: 'decompressed ' + plain.length + ' bytes, need ' + end });
      continue;
    }
    const data = plain.subarray(c.innerOffset, end);
    const actual = sha256(data);
    if (actual !== c.digest) {
      results.push({ ok: false, kind: 'mismatch', message: 'digest mismatch', actual });
      continue;
    }
    const ab = new ArrayBuffer(data.length);
    new Uint8Array(ab).set(data);
    transfer.push(ab);
    results.push({ ok: true, data: ab, byteOffset: 0, length: data.length });
  }
  parentPort.postMessage({ id, ok: true, results }, transfer);
}

async function handle(m) {
  const id = m.id;
  if (m.op === 'sha256') {
    const h = crypto.createHash('sha256');
    for (const ab of m.src) h.update(new Uint8Array(ab));
    parentPort.postMessage({ id, ok: true, digest: 'sha256:' + h.digest('hex') });
    return;
  }
  if (m.op === 'zeros') {
    const actual = await zerosDigest(m.size);
    if (actual !== m.digest) return fail(id, 'mismatch', 'digest mismatch', actual);
    parentPort.postMessage({ id, ok: true });
    return;
  }
  if (m.op === 'decodeMany') return await decodeMany(m);
  await decode(m);
}

parentPort.on('message', (m) => {
  handle(m).catch((err) => fail(m.id, 'decompress', errorText(err)));
});
`;
