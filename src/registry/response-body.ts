import type { Dispatcher } from 'undici';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { networkErrorCode } from './retry.js';
import { notFoundMessage } from './not-found.js';
import type { Response } from './transport.js';

/** Reading registry answers: bodies with a size cap, error pages, and their typed errors. */

const MAX_ERROR_BODY = 64 * 1024;

/** Discard a body without reading much of it (error pages, redirects). */
export async function dump(res: { body: Dispatcher.ResponseData['body'] }): Promise<void> {
  try {
    await res.body.dump({ limit: MAX_ERROR_BODY });
  } catch {
    /* the connection is gone; nothing to clean up */
  }
}

/** The whole body, or `tooLarge()` (the body destroyed) as soon as it passes `maxBytes`. */
export async function collectBody(
  body: Dispatcher.ResponseData['body'],
  maxBytes: number,
  tooLarge: () => StoreError,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of body as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > maxBytes) {
      body.destroy();
      throw tooLarge();
    }
    chunks.push(c);
  }
  return Buffer.concat(chunks, size);
}

/** Read a whole body with a size cap; transport failures surface as retryable E_REGISTRY_NETWORK. */
export async function readBody(res: Response, maxBytes: number, ctx: ErrorContext): Promise<Buffer> {
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    await dump(res);
    throw new StoreError('E_TOO_LARGE', `response of ${declared} bytes exceeds the ${maxBytes} byte limit`, {
      ...ctx,
      size: declared,
      limit: maxBytes,
    });
  }
  let body: Buffer;
  try {
    body = await collectBody(
      res.body,
      maxBytes,
      () =>
        new StoreError('E_TOO_LARGE', `response exceeds the ${maxBytes} byte limit`, {
          ...ctx,
          limit: maxBytes,
        }),
    );
  } catch (err) {
    if (err instanceof StoreError) throw err;
    if (res.signal.aborted) throw err;
    throw new StoreError(
      'E_REGISTRY_NETWORK',
      `connection failed while reading the response: ${networkErrorCode(err)}`,
      ctx,
      { cause: err },
    );
  }
  if (Number.isFinite(declared) && body.length !== declared) {
    throw new StoreError('E_TRUNCATED', `response body has ${body.length} of ${declared} bytes`, {
      ...ctx,
      got: body.length,
      expected: declared,
    });
  }
  return body;
}

/** Map a non-success status to a typed error (after reading a bounded part of the body). */
export async function statusError(res: Response, ctx: ErrorContext): Promise<StoreError> {
  let detail = '';
  try {
    const body = await readBody(res, MAX_ERROR_BODY, ctx);
    const j = JSON.parse(body.toString('utf8')) as { errors?: Array<{ code?: unknown }> };
    const codes = (j.errors ?? []).map((e) => e.code).filter((c): c is string => typeof c === 'string');
    if (codes.length) detail = ` (${codes.join(', ').slice(0, 100)})`;
  } catch {
    /* not a registry error document */
  }
  const c = { ...ctx, status: res.status };
  switch (res.status) {
    case 401:
      return new StoreError('E_REGISTRY_UNAUTHORIZED', `registry refused access${detail}`, c);
    case 403:
      return new StoreError('E_REGISTRY_DENIED', `registry denied access${detail}`, c);
    case 404:
      return new StoreError('E_REGISTRY_NOT_FOUND', notFoundMessage(ctx, detail), c);
    default:
      return new StoreError('E_REGISTRY_STATUS', `unexpected HTTP ${res.status}${detail}`, c);
  }
}
