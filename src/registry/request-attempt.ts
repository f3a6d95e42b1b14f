import type { Dispatcher } from 'undici';
import { request } from './undici-core.js';
import { StoreError, type ErrorContext } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { AuthContext, Authorizer } from './authorizer.js';
import { endpointUrl, type Endpoint } from './hosts.js';
import { dump } from './response-body.js';
import type { RequestSpec, Response } from './transport.js';

/** What one attempt needs of its Transport. */
export interface AttemptDeps {
  authorizer: Authorizer;
  dispatcher(ep: Endpoint, forHead: boolean): Promise<Dispatcher>;
  userAgent: string;
  maxRedirects: number | undefined;
  logger: Logger;
  /** Called for every request sent (redirects and re-sends included). */
  countRequest(): void;
}

/**
 * One attempt: the Authorization header, redirects (Authorization and host headers dropped across
 * origins, Range kept), one re-send after a 401 challenge, and one fresh start after a refused
 * pre-signed storage URL. Retries and deadlines are the caller's (Transport.send).
 */
export async function sendAttempt(
  t: AttemptDeps,
  spec: RequestSpec,
  signal: AbortSignal,
  ctx: ErrorContext,
): Promise<Response> {
  const ep = spec.ep;
  const auth: AuthContext = { ep, scope: `repository:${ep.repository}:pull`, ref: spec.ref };
  const dispatcher = await t.dispatcher(ep, spec.method === 'HEAD');
  const start = new URL(endpointUrl(ep, spec.path));
  let authorization = await t.authorizer.headerFor(auth, signal);
  let authRetried = false;
  let foreignRetried = false;
  let url = start;
  const maxRedirects = t.maxRedirects ?? 10;
  for (let hop = 0; ; hop++) {
    const sameOrigin = url.origin === ep.origin;
    const headers: Record<string, string | string[]> = { 'user-agent': t.userAgent };
    if (sameOrigin) {
      for (const [k, v] of Object.entries(ep.options.headers ?? {})) headers[k.toLowerCase()] = v;
      if (authorization) headers.authorization = authorization;
    }
    for (const [k, v] of Object.entries(spec.headers ?? {})) headers[k.toLowerCase()] = v;
    t.countRequest();
    const res = await request(url, { method: spec.method ?? 'GET', headers, signal, dispatcher });
    const status = res.statusCode;
    const location = res.headers.location;
    if (status >= 300 && status < 400 && status !== 304 && location) {
      await dump({ body: res.body });
      if (hop >= maxRedirects) {
        throw new StoreError('E_REGISTRY_PROTOCOL', `too many redirects fetching ${spec.what}`, ctx);
      }
      const next = new URL(Array.isArray(location) ? location[0]! : location, url);
      if (next.protocol !== 'http:' && next.protocol !== 'https:') {
        throw new StoreError('E_REGISTRY_PROTOCOL', `redirect to unsupported scheme ${next.protocol}`, ctx);
      }
      t.logger.debug({ ...ctx, from: url.origin, to: next.origin }, 'registry redirect');
      url = next;
      continue;
    }
    if (status === 401 && sameOrigin && !authRetried) {
      const challenge = res.headers['www-authenticate'];
      await dump({ body: res.body });
      authRetried = true;
      authorization = await t.authorizer.onUnauthorized(auth, challenge, authorization, signal);
      url = start;
      continue;
    }
    if ((status === 401 || status === 403) && !sameOrigin && !foreignRetried) {
      // an expired pre-signed storage URL: ask the registry for a fresh one, once
      await dump({ body: res.body });
      foreignRetried = true;
      url = start;
      continue;
    }
    return { status, headers: res.headers, body: res.body, url, signal };
  }
}
