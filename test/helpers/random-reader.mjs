// A reader process for concurrency tests: random preads on files under a FUSE mount, each
// compared with the same range of a local copy of the expected file. Plain JavaScript (no loader)
// so 32 of them start quickly. Input (JSON on stdin):
//   { files: [{ path, expected, size }], reads, maxLength, seed, inFlight, direct }
// Output (JSON on stdout): { reads, bytes, mismatches, errors, firstProblem }.
// `direct` opens the mount with O_DIRECT so every read reaches the store, not the page cache.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { Buffer } from 'node:buffer';
import process from 'node:process';

async function readStdin() {
  const parts = [];
  for await (const b of process.stdin) parts.push(b);
  return JSON.parse(Buffer.concat(parts).toString('utf8'));
}

/** xorshift32: a seeded generator, so a failing run can be replayed with its seed. */
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x100000000;
  };
}

async function readFully(fh, buf, offset) {
  let done = 0;
  while (done < buf.length) {
    const { bytesRead } = await fh.read(buf, done, buf.length - done, offset + done);
    if (bytesRead === 0) break;
    done += bytesRead;
  }
  return done;
}

const job = await readStdin();
const random = rng(job.seed);
const flags = constants.O_RDONLY | (job.direct ? constants.O_DIRECT : 0);
const handles = [];
for (const f of job.files) {
  handles.push({
    size: f.size,
    path: f.path,
    got: await open(f.path, flags),
    want: await open(f.expected, 'r'),
  });
}
const out = { reads: 0, bytes: 0, mismatches: 0, errors: 0, firstProblem: null };
let next = 0;

async function one() {
  const h = handles[Math.floor(random() * handles.length)];
  const length = 1 + Math.floor(random() * job.maxLength);
  // now and then a read that runs past the end of the file (a short read must match too)
  const offset = Math.floor(random() * Math.max(1, h.size - (random() < 0.05 ? 0 : length)));
  const got = Buffer.alloc(length);
  const want = Buffer.alloc(length);
  try {
    const n = await readFully(h.got, got, offset);
    const m = await readFully(h.want, want, offset);
    out.reads++;
    out.bytes += n;
    if (n !== m || !got.subarray(0, n).equals(want.subarray(0, m))) {
      out.mismatches++;
      out.firstProblem ??= `mismatch in ${h.path} at ${offset}+${length}: got ${n} bytes, want ${m}`;
    }
  } catch (err) {
    out.errors++;
    out.firstProblem ??= `error in ${h.path} at ${offset}+${length}: ${err.code ?? err.message}`;
  }
}

async function lane() {
  while (next < job.reads) {
    next++;
    await one();
  }
}

await Promise.all(Array.from({ length: job.inFlight }, lane));
for (const h of handles) {
  await h.got.close();
  await h.want.close();
}
process.stdout.write(JSON.stringify(out) + '\n');
