import { sha256Async } from '../format/codec.js';

/**
 * Hex sha256 of `data`, never blocking the event loop (the FUSE server) for a large chunk: the
 * store's one hashing helper (format/codec.ts sha256Async) hashes in steps, serving the loop between.
 */
export async function sha256Hex(data: Uint8Array): Promise<string> {
  return (await sha256Async(data)).slice('sha256:'.length);
}
