import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';

/**
 * The parts of prom-client the store uses, loaded without prom-client's index module: the index
 * also loads histograms, summaries (t-digest, red-black trees), its Pushgateway, its cluster
 * aggregator and the default process metrics, whose CPU metric loads @opentelemetry/api (51
 * modules), in every store, metrics on or off. The default metrics load here only when metrics
 * are turned on. Measured in a bare Node 24 process, prom-client 15.1.3: index +2.0 MB of heap
 * and +21 MB RSS, registry + counter + gauge +0.1-0.5 MB and +3 MB. prom-client has no `exports`
 * map; its version is pinned exactly in package.json and test/unit/util-prom-client-core.test.ts
 * checks these are still the index's own exports. Types still come from the package.
 */
const load = createRequire(import.meta.url);

export const Registry = load('prom-client/lib/registry') as typeof PromClient.Registry;
export const Counter = load('prom-client/lib/counter') as typeof PromClient.Counter;
export const Gauge = load('prom-client/lib/gauge') as typeof PromClient.Gauge;
export type Registry = PromClient.Registry;
export type Counter<T extends string = string> = PromClient.Counter<T>;
export type Gauge<T extends string = string> = PromClient.Gauge<T>;

/** prom-client's default process metrics, loaded on first use. */
export function collectDefaultMetrics(config: Parameters<typeof PromClient.collectDefaultMetrics>[0]): void {
  (load('prom-client/lib/defaultMetrics') as typeof PromClient.collectDefaultMetrics)(config);
}
