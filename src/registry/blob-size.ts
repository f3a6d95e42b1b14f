import { StoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { parseContentRange } from './byte-ranges.js';
import type { Endpoint } from './hosts.js';
import type { ImageRef } from './reference.js';
import { dump, statusError } from './response-body.js';
import type { Transport } from './transport.js';

/**
 * The blob's size as `ep` reports it: HEAD, else a one-byte range GET (front-ends that refuse HEAD
 * or omit its length). `deadlineMs()` is what is left of the caller's budget for each request.
 */
export async function probeBlobSize(
  transport: Transport,
  logger: Logger,
  ep: Endpoint,
  ref: ImageRef,
  digest: string,
  signal: AbortSignal,
  deadlineMs: () => number,
): Promise<number> {
  const base = {
    ep,
    path: `blobs/${digest}`,
    ref: ref.toString(),
    what: 'blob',
    signal,
    context: { digest },
  };
  const ctx = { host: ep.host, digest, what: 'blob' };
  const head = await transport.send({ ...base, method: 'HEAD', deadlineMs: deadlineMs() }, async (res) => {
    // The registry itself saying "no such blob" or "who are you" is final. Anything else that
    // is not a 200 falls back to the GET probe: front-ends that refuse HEAD (405, 403), and
    // pre-signed storage URLs after a redirect, which are often signed for GET only (403/401).
    const crossOrigin = res.url.origin !== ep.origin;
    if (!crossOrigin && (res.status === 404 || res.status === 401)) throw await statusError(res, ctx);
    await dump(res);
    if (res.status !== 200) {
      logger.debug(
        { ...ctx, status: res.status, crossOrigin },
        'HEAD gave no blob size; probing with a one-byte range GET',
      );
      return undefined;
    }
    const dcd = res.headers['docker-content-digest'];
    if (typeof dcd === 'string' && dcd !== digest) {
      throw new StoreError('E_REGISTRY_PROTOCOL', `registry answered for ${dcd.slice(0, 80)}`, ctx);
    }
    const n = Number(res.headers['content-length']);
    return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
  });
  if (head !== undefined) return head;
  // Some storage front-ends refuse HEAD or omit its length: one byte tells the total.
  return transport.send(
    {
      ...base,
      headers: { range: 'bytes=0-0', 'accept-encoding': 'identity' },
      deadlineMs: deadlineMs(),
    },
    async (res) => {
      if (res.status === 206) {
        const cr = parseContentRange(res.headers['content-range'], ctx);
        await dump(res);
        return cr.total;
      }
      if (res.status === 200) {
        const n = Number(res.headers['content-length']);
        res.body.destroy();
        if (Number.isSafeInteger(n) && n >= 0) return n;
        throw new StoreError('E_REGISTRY_PROTOCOL', 'cannot determine the blob size', ctx);
      }
      throw await statusError(res, ctx);
    },
  );
}
