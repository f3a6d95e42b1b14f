import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { disableMetrics, enableMetrics, metricsRegistry } from '../../src/util/metrics.js';
import { Counter, Gauge, Registry } from '../../src/util/prom-client-core.js';

const load = createRequire(import.meta.url);
const loaded = (re: RegExp): boolean => Object.keys(load.cache).some((k) => re.test(k));
const INDEX = /node_modules\/prom-client\/index\.js$/;
const DEFAULTS = /node_modules\/prom-client\/lib\/defaultMetrics\.js$/;
const OTEL = /node_modules\/@opentelemetry\//;

describe('prom-client-core', () => {
  it('the store loads neither the index nor the default metrics (and OpenTelemetry) while metrics are off', () => {
    expect(loaded(INDEX)).toBe(false);
    expect(loaded(DEFAULTS)).toBe(false);
    expect(loaded(OTEL)).toBe(false);
  });

  it('loads the default process metrics when metrics are turned on with them', async () => {
    enableMetrics({ processMetrics: true });
    try {
      expect(loaded(DEFAULTS)).toBe(true);
      expect(await metricsRegistry.metrics()).toContain('stargz_store_process_cpu_seconds_total');
    } finally {
      disableMetrics();
    }
  });

  it("uses the index's own classes and function", () => {
    const index = load('prom-client') as Record<string, unknown>;
    expect(Registry).toBe(index.Registry);
    expect(Counter).toBe(index.Counter);
    expect(Gauge).toBe(index.Gauge);
    expect(load('prom-client/lib/defaultMetrics')).toBe(index.collectDefaultMetrics);
  });

  it('counts and exposes series through a registry of its own', async () => {
    const registry = new Registry();
    const c = new Counter({ name: 'probe_total', help: 'probe', labelNames: ['k'], registers: [registry] });
    c.inc({ k: 'a' }, 2);
    new Gauge({ name: 'probe_level', help: 'level', registers: [registry] }).set(7);
    const text = await registry.metrics();
    expect(text).toContain('probe_total{k="a"} 2');
    expect(text).toContain('probe_level 7');
  });
});
