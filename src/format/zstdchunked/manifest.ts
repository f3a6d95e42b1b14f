import { createRequire } from 'node:module';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { StoreError } from '../../util/errors.js';

interface DCtx {
  decompressStream(dst: Uint8Array, src: Uint8Array): [ret: number, produced: number, consumed: number];
}
const require = createRequire(import.meta.url);
const binding = require('zstd-napi/binding') as { DCtx: new () => DCtx };

/** Input fed to zstd per step; the event loop gets a turn between steps. */
const STEP = 256 * 1024;

/**
 * Decompress the zstd:chunked manifest, which must decode to exactly `expectedLength` bytes.
 * Bounded (never allocates more than expectedLength + 1, whatever the frame headers claim) and
 * incremental so a big manifest does not hold the event loop for its whole decode.
 */
export async function decompressManifest(
  compressed: Buffer,
  expectedLength: number,
  signal?: AbortSignal,
): Promise<Buffer> {
  const out = Buffer.allocUnsafe(expectedLength + 1);
  const dctx = new binding.DCtx();
  let outPos = 0;
  let inPos = 0;
  let lastRet = -1;
  try {
    while (inPos < compressed.length) {
      if (signal?.aborted) throw new StoreError('E_ABORTED', 'aborted while decompressing the manifest');
      let src = compressed.subarray(inPos, Math.min(compressed.length, inPos + STEP));
      while (src.length > 0) {
        const [ret, produced, consumed] = dctx.decompressStream(out.subarray(outPos), src);
        outPos += produced;
        inPos += consumed;
        src = src.subarray(consumed);
        lastRet = ret;
        if (outPos > expectedLength) {
          throw new StoreError(
            'E_BAD_TOC',
            `manifest decompresses to more than the ${expectedLength} bytes announced`,
          );
        }
        if (produced === 0 && consumed === 0)
          throw new StoreError('E_BAD_TOC', 'manifest decompression stalled');
      }
      if (inPos < compressed.length) await yieldToLoop();
    }
  } catch (err) {
    if (err instanceof StoreError) throw err;
    throw new StoreError('E_BAD_TOC', `cannot decompress zstd:chunked manifest: ${(err as Error).message}`);
  }
  if (lastRet !== 0) throw new StoreError('E_BAD_TOC', 'zstd:chunked manifest ends in the middle of a frame');
  if (outPos !== expectedLength) {
    throw new StoreError(
      'E_BAD_TOC',
      `manifest decompresses to ${outPos} bytes, footer says ${expectedLength}`,
    );
  }
  return out.subarray(0, outPos);
}
