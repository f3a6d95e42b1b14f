import { createRequire } from 'node:module';
import type { Agent as UndiciAgent, Dispatcher } from 'undici';

/**
 * The parts of undici the store runs on (its Agent and its `request` API), loaded without
 * undici's index module: the index loads every feature undici has (fetch, WebSocket,
 * EventSource, mock agents, cache stores, HTTP/2 cleartext, SOCKS proxies) and the store uses
 * none of them. Measured in a bare Node 24 process, undici 8.12.4: the index costs +5.2 MB of
 * heap and +29 MB RSS, these two modules +2.5 MB and +16 MB; a smaller heap also makes every
 * full garbage collection cheaper (util/gc-pacer.ts). undici has no `exports` map, so these paths
 * are public files of the package; its version is pinned exactly in package.json, and
 * test/unit/registry-undici-core.test.ts checks they still are the index's own exports, so an
 * upgrade that moves them fails a test, not the store. Types still come from the package.
 */
const load = createRequire(import.meta.url);

export const Agent = load('undici/lib/dispatcher/agent.js') as typeof UndiciAgent;

type ApiRequest = (this: Dispatcher, opts: Dispatcher.RequestOptions) => Promise<Dispatcher.ResponseData>;
const apiRequest = load('undici/lib/api/api-request.js') as ApiRequest;

export type RequestOptions = Omit<Dispatcher.RequestOptions, 'origin' | 'path' | 'method'> & {
  method: Dispatcher.HttpMethod;
  /** Every request names its dispatcher: the store never uses a global one. */
  dispatcher: Dispatcher;
};

/** undici's `request(url, opts)`: the URL split into origin and path for the dispatcher. */
export function request(url: URL, opts: RequestOptions): Promise<Dispatcher.ResponseData> {
  const { dispatcher, ...rest } = opts;
  return apiRequest.call(dispatcher, {
    ...rest,
    origin: url.origin,
    path: url.search ? `${url.pathname}${url.search}` : url.pathname,
  });
}
