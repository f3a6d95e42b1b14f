import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { collectDefaultMetrics, Counter, Gauge, Registry } from './prom-client-core.js';
import { metricHooks } from './metric-hooks.js';

/**
 * The store's Prometheus series, in one registry of our own (never prom-client's global one, so tests
 * and embedders do not collide). They live in util/ because every layer records into them; only
 * recording helpers are exported, and each costs one boolean test while metrics are off (the default).
 *
 * Sources that already count for themselves (the chunk cache, the layer table, the pin set) are not
 * instrumented line by line: `setMetricSources` hands over functions that are read at scrape time.
 * Registry traffic is counted from undici's diagnostics channels, so the transport needs no edits.
 * Labels carry operation names, registry hosts and HTTP status only: never paths, refs or credentials.
 */

export const metricsRegistry = new Registry();

let enabled = false;

/**
 * A histogram with one fixed label, accumulated in plain arrays: prom-client's own `observe` costs
 * about 1.5 us (label validation and hashing on every call), too much for the FUSE read path;
 * this costs a few tens of ns. prom-client's registry renders it like any histogram.
 */
class FastHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, { buckets: Float64Array; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly label: string,
    private readonly bounds: readonly number[],
  ) {}

  /** The accumulator of one label value (callers keep it: no lookup per observation). */
  child(value: string): (seconds: number) => void {
    let s = this.series.get(value);
    if (s === undefined) {
      s = { buckets: new Float64Array(this.bounds.length), sum: 0, count: 0 };
      this.series.set(value, s);
    }
    const series = s;
    const bounds = this.bounds;
    return (v) => {
      let i = 0;
      while (i < bounds.length && v > bounds[i]!) i++;
      if (i < bounds.length) series.buckets[i]!++;
      series.sum += v;
      series.count++;
    };
  }

  reset(): void {
    for (const s of this.series.values()) {
      s.buckets.fill(0);
      s.sum = 0;
      s.count = 0;
    }
  }

  /** prom-client's metric contract (what Registry#metrics renders). */
  get(): {
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: Array<{ labels: Record<string, string | number>; value: number; metricName: string }>;
  } {
    const values: Array<{ labels: Record<string, string | number>; value: number; metricName: string }> = [];
    for (const [v, s] of this.series) {
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += s.buckets[i]!;
        values.push({ labels: { le, [this.label]: v }, value: acc, metricName: `${this.name}_bucket` });
      });
      values.push({
        labels: { le: '+Inf', [this.label]: v },
        value: s.count,
        metricName: `${this.name}_bucket`,
      });
      values.push({ labels: { [this.label]: v }, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: { [this.label]: v }, value: s.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

const fuseDuration = new FastHistogram(
  'stargz_store_fuse_operation_duration_seconds',
  'Duration of FUSE operations answered by the store, by operation',
  'operation',
  [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30],
);
metricsRegistry.registerMetric(fuseDuration as unknown as Parameters<Registry['registerMetric']>[0]);
const deadlineExpiries = new Counter({
  name: 'stargz_store_fuse_deadline_expiries_total',
  help: 'FUSE operations answered with an error because their deadline expired, by operation',
  labelNames: ['operation'] as const,
  registers: [metricsRegistry],
});
const registryBytes = new Counter({
  name: 'stargz_store_registry_bytes_total',
  help: 'Response body bytes received from registries (and their storage redirects), by host and HTTP status',
  labelNames: ['host', 'status'] as const,
  registers: [metricsRegistry],
});
const registryRequests = new Counter({
  name: 'stargz_store_registry_requests_total',
  help: 'HTTP requests sent to registries, by host and HTTP status ("error" when no answer came)',
  labelNames: ['host', 'status'] as const,
  registers: [metricsRegistry],
});
const backgroundBytes = new Counter({
  name: 'stargz_store_background_bytes_total',
  help: 'Compressed bytes fetched by background (whole-layer) fetching',
  registers: [metricsRegistry],
});

/** What the chunk cache reports about itself (a subset of ChunkCacheStats). */
export interface CacheMetricsSnapshot {
  diskBytes: number;
  memoryBytes: number;
  memoryHits: number;
  diskHits: number;
  misses: number;
  corrupt: number;
}

export interface MetricSources {
  cache?: () => CacheMetricsSnapshot;
  /** Layer count per state (e.g. fetching, verified, error, not_lazy, resolving). */
  layers?: () => Record<string, number>;
  /** Pinned image count per state (pending, fetching, pinned, failed). */
  pins?: () => Record<string, number>;
}

let sources: MetricSources = {};

/** Replace (merge) the scrape-time sources; pass `undefined` for a key to drop it. */
export function setMetricSources(s: MetricSources): void {
  sources = { ...sources, ...s };
}

function cacheSnapshot(): CacheMetricsSnapshot | undefined {
  try {
    return sources.cache?.();
  } catch {
    return undefined;
  }
}

/** A scrape-time collector mirroring the cache's snapshot: reset, then `write` it (when there is one). */
function fromCache<M extends { reset(): void }>(
  write: (metric: M, s: CacheMetricsSnapshot) => void,
): (this: M) => void {
  return function (this: M): void {
    const s = cacheSnapshot();
    this.reset();
    if (s !== undefined) write(this, s);
  };
}

new Gauge({
  name: 'stargz_store_cache_bytes',
  help: 'Bytes held by the chunk cache, by tier (disk = block-rounded file sizes, memory = LRU)',
  labelNames: ['tier'] as const,
  registers: [metricsRegistry],
  collect: fromCache<Gauge<'tier'>>((m, s) => {
    m.set({ tier: 'disk' }, s.diskBytes);
    m.set({ tier: 'memory' }, s.memoryBytes);
  }),
});
// Counters mirrored from the cache's own counts: reset + inc keeps them monotonic per process.
new Counter({
  name: 'stargz_store_cache_hits_total',
  help: 'Chunk cache lookups served from the cache, by tier',
  labelNames: ['tier'] as const,
  registers: [metricsRegistry],
  collect: fromCache<Counter<'tier'>>((m, s) => {
    m.inc({ tier: 'memory' }, s.memoryHits);
    m.inc({ tier: 'disk' }, s.diskHits);
  }),
});
new Counter({
  name: 'stargz_store_cache_misses_total',
  help: 'Chunk cache lookups that found nothing usable (the chunk is fetched)',
  registers: [metricsRegistry],
  collect: fromCache<Counter>((m, s) => m.inc(s.misses)),
});
new Gauge({
  name: 'stargz_store_layers',
  help: 'Layers the store knows, by state',
  labelNames: ['state'] as const,
  registers: [metricsRegistry],
  collect() {
    this.reset();
    for (const [state, n] of Object.entries(safe(sources.layers))) this.set({ state }, n);
  },
});
new Gauge({
  name: 'stargz_store_pinned_images',
  help: 'Pinned images, by state (pending, fetching, pinned, failed)',
  labelNames: ['state'] as const,
  registers: [metricsRegistry],
  collect() {
    this.reset();
    const counts = { pending: 0, fetching: 0, pinned: 0, failed: 0, ...safe(sources.pins) };
    for (const [state, n] of Object.entries(counts)) this.set({ state }, n);
  },
});

/** Failed digest checks by kind; the cache's own count (`corrupt`) is added at scrape time. */
const verificationFailureCounts = new Map<string, number>();
new Counter({
  name: 'stargz_store_verification_failures_total',
  help: 'Digest checks that failed (chunk, toc, diffid, blob; cache = a cached chunk that no longer matched)',
  labelNames: ['what'] as const,
  registers: [metricsRegistry],
  collect() {
    this.reset();
    for (const [what, n] of verificationFailureCounts) this.inc({ what }, n);
    const s = cacheSnapshot();
    if (s !== undefined) this.inc({ what: 'cache' }, s.corrupt);
  },
});

function safe(f: (() => Record<string, number>) | undefined): Record<string, number> {
  try {
    return f?.() ?? {};
  } catch {
    return {};
  }
}

// Children per label value: the hot path never hashes a label object.
const fuseChildren = new Map<string, (seconds: number) => void>();

/**
 * Times one FUSE operation and counts its deadline expiry; returns `p` itself so the caller's
 * promise chain is unchanged. Costs nothing but a boolean test while metrics are off.
 */
export function timeFuseOp<T>(operation: string, p: Promise<T>): Promise<T> {
  if (!enabled) return p;
  const start = performance.now();
  let child = fuseChildren.get(operation);
  if (child === undefined) {
    child = fuseDuration.child(operation);
    fuseChildren.set(operation, child);
  }
  const c = child;
  p.then(
    () => c((performance.now() - start) / 1000),
    (err: unknown) => {
      c((performance.now() - start) / 1000);
      if ((err as { code?: unknown } | null)?.code === 'E_DEADLINE') deadlineExpiries.inc({ operation });
    },
  );
  return p;
}

/** A digest check failed (`what`: chunk, toc, diffid, blob, cache). */
export function recordVerificationFailure(what: string): void {
  if (enabled) verificationFailureCounts.set(what, (verificationFailureCounts.get(what) ?? 0) + 1);
}
metricHooks.verificationFailure = recordVerificationFailure;

/** Compressed bytes fetched by background fetching. */
export function recordBackgroundBytes(n: number): void {
  if (enabled) backgroundBytes.inc(n);
}

// ---- registry traffic from undici's diagnostics channels ----

interface UndiciRequest {
  origin?: string | URL;
}
type BytesChild = ReturnType<typeof registryBytes.labels>;
/** Per in-flight request: the bytes child of its (host, status), set when the headers arrive. */
const inflight = new WeakMap<object, BytesChild | null>();

function hostOf(req: UndiciRequest): string {
  try {
    return req.origin === undefined ? 'unknown' : new URL(String(req.origin)).host;
  } catch {
    return 'unknown';
  }
}

const onHeaders = (msg: unknown): void => {
  const m = msg as { request: UndiciRequest; response: { statusCode: number } };
  const labels = { host: hostOf(m.request), status: String(m.response.statusCode) };
  registryRequests.inc(labels);
  inflight.set(m.request, registryBytes.labels(labels));
};
const onChunk = (msg: unknown): void => {
  const m = msg as { request: object; chunk: Uint8Array };
  inflight.get(m.request)?.inc(m.chunk.length);
};
const onError = (msg: unknown): void => {
  const m = msg as { request: UndiciRequest };
  // an error after the headers (a reset body) was already counted as a request with its status
  if (inflight.has(m.request)) return;
  inflight.set(m.request, null);
  registryRequests.inc({ host: hostOf(m.request), status: 'error' });
};

const CHANNELS: Array<[string, (msg: unknown) => void]> = [
  ['undici:request:headers', onHeaders],
  ['undici:request:bodyChunkReceived', onChunk],
  ['undici:request:error', onError],
];

let defaultsCollected = false;

/** Start recording (the serve command does this when `metrics_address` is set). Idempotent. */
export function enableMetrics(opts: { processMetrics?: boolean } = {}): void {
  if (enabled) return;
  enabled = true;
  for (const [name, fn] of CHANNELS) subscribe(name, fn);
  if (opts.processMetrics === true && !defaultsCollected) {
    defaultsCollected = true;
    collectDefaultMetrics({ register: metricsRegistry, prefix: 'stargz_store_' });
  }
}

/** Stop recording (tests, benchmarks). Values recorded so far stay. */
export function disableMetrics(): void {
  if (!enabled) return;
  enabled = false;
  for (const [name, fn] of CHANNELS) unsubscribe(name, fn);
}

export function metricsEnabled(): boolean {
  return enabled;
}

/** The text exposition of every series (what `/metrics` serves). */
export async function renderMetrics(): Promise<{ contentType: string; body: string }> {
  return { contentType: metricsRegistry.contentType, body: await metricsRegistry.metrics() };
}

/** Zero every recorded series (tests). */
export function resetMetrics(): void {
  metricsRegistry.resetMetrics();
  fuseDuration.reset();
  verificationFailureCounts.clear();
}
