import { setImmediate as yieldToLoop } from 'node:timers/promises';

/** Copy granule: copying a big input in one go would stall the event loop for tens of ms. */
const STEP = 1 << 20;

/**
 * Copy `buf` into a fresh ArrayBuffer that can be transferred to a worker thread (the caller keeps
 * its own buffer, which may be shared with a cache). Copies 1 MiB at a time and yields to the
 * event loop in between, so a large input never blocks other requests for more than one step.
 */
export async function transferableCopy(buf: Uint8Array): Promise<ArrayBuffer> {
  const ab = new ArrayBuffer(buf.length);
  const view = new Uint8Array(ab);
  for (let off = 0; off < buf.length; off += STEP) {
    if (off > 0) await yieldToLoop();
    view.set(buf.subarray(off, Math.min(buf.length, off + STEP)), off);
  }
  return ab;
}
