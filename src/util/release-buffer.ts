import { gcPacer } from './gc-pacer.js';
import { atNextTurn } from './next-turn.js';

/**
 * Give a dead Buffer's memory back now instead of at the next full garbage collection.
 *
 * The store's churn is Buffers that V8 frees only when it collects the objects holding them: a
 * background pass over a zstd:chunked layer decodes thousands of ~54 KiB chunks, each written to
 * disk and then dead, and until the next (paced) collection they stay in malloc's heap, where the
 * live pieces between them keep the pages resident (bench/README.md, session 16). Detaching the
 * ArrayBuffer (ArrayBuffer.prototype.transfer(0)) frees its backing store at once.
 *
 * Only a Buffer that is the whole of its ArrayBuffer is released: never a view into Node's shared
 * allocation pool or into a larger decode buffer, whose other bytes may belong to someone else.
 * The caller must hold the only reference that will ever be used again: afterwards every view of
 * it is empty (length 0), so a mistaken use reads nothing rather than other bytes. The bytes are
 * taken off the garbage collection pacer's count (util/gc-pacer.ts): they need no collection.
 * `counted: false` for bytes the pacer never counted (socket reads): no credit for them, or the
 * next collection of garbage it did count would come late.
 */
export function releaseBuffer(buf: Buffer, opts: { counted?: boolean } = {}): boolean {
  const ab = buf.buffer as ArrayBuffer & { transfer?: (length: number) => ArrayBuffer; detached?: boolean };
  if (buf.byteOffset !== 0 || ab.byteLength !== buf.length || buf.length === 0) return false;
  if (typeof ab.transfer !== 'function' || ab.detached === true) return false;
  try {
    const n = buf.length;
    ab.transfer(0);
    if (opts.counted !== false) gcPacer.gaveBack(n);
    return true;
  } catch {
    // not detachable (a buffer V8 or a native module owns): left to the garbage collector
    return false;
  }
}

/**
 * Release `buf` at the start of the next turn of the event loop (see releaseBuffer): for a buffer
 * handed to a caller that copies it within the current turn (a transient read's answer).
 */
export function releaseNextTurn(buf: Buffer, opts: { counted?: boolean } = {}): void {
  atNextTurn(() => releaseBuffer(buf, opts));
}
