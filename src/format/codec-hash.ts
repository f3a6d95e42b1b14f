import { createHash, type Hash } from 'node:crypto';
import { setImmediate as yieldToLoop } from 'node:timers/promises';

/**
 * Hashed on this thread in steps of this size (~0.6 ms each), the event loop served between.
 * Not WebCrypto on the thread pool: it copies its input first, and with the store's fixed glibc
 * mmap threshold (bin/store-env) each copy is a fresh mapping paid in page faults: 80-85 ms of
 * main thread per 128 MiB against 76 ms to hash it here. Measured in process
 * (bench/cold-read.js, 120 MiB shard, eStargz, 3 runs each): 341-381 -> 458-487 MB/s, CPU
 * 3.9-4.5 -> 3.2-3.3 ms/MB.
 */
const STEP = 1024 * 1024;

/**
 * `sha256:<hex>` of `buf` without blocking the event loop for long: in steps with the event loop
 * served between them (no copy of the input). The one hashing helper of the store: chunk
 * verification, the TOC, cache reads and CLI checks all use it. The caller's buffer is never
 * detached or modified.
 */
export async function sha256Async(buf: Uint8Array): Promise<string> {
  const h = createHash('sha256');
  for (let off = 0; off < buf.length; off += STEP) {
    if (off > 0) await yieldToLoop();
    h.update(buf.subarray(off, Math.min(buf.length, off + STEP)));
  }
  return 'sha256:' + h.digest('hex');
}

/** A fixed zero buffer fed repeatedly: a hole of any size never costs its size in memory. */
const ZERO = Buffer.alloc(STEP);
/** Hash states kept every CHECKPOINT bytes, so holes of other lengths resume from the nearest. */
const CHECKPOINT = 64 << 20;
const zeroStates: Hash[] = [createHash('sha256')];

/** `sha256:<hex>` of `size` zero bytes, in steps with the event loop served between them. */
export async function zerosDigest(size: number): Promise<string> {
  if (size <= STEP) return 'sha256:' + createHash('sha256').update(ZERO.subarray(0, size)).digest('hex');
  const k = Math.min(Math.floor(size / CHECKPOINT), zeroStates.length - 1);
  const h = zeroStates[k]!.copy();
  let pos = k * CHECKPOINT;
  while (pos < size) {
    const n = Math.min(ZERO.length, size - pos);
    h.update(n === ZERO.length ? ZERO : ZERO.subarray(0, n));
    pos += n;
    if (pos % CHECKPOINT === 0 && pos / CHECKPOINT === zeroStates.length) zeroStates.push(h.copy());
    await yieldToLoop();
  }
  return 'sha256:' + h.digest('hex');
}
