import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startMetricsServer, type MetricsServer } from '../../src/store/metrics-server.js';
import { layerStateCounts } from '../../src/store/metrics-sources.js';
import { disableMetrics, resetMetrics, setMetricSources } from '../../src/util/metrics.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { probe } from '../helpers/fuse.js';
import { appImage } from '../helpers/app-image.js';
import { startMountedStore, type MountedStore } from '../helpers/mounted-store.js';
import { pushImage, sha256 } from '../helpers/store.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');

/** GET with node:http (global fetch would itself show up in the undici channels we count). */
function get(url: string): Promise<{ status: number; type: string; body: string }> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }),
      );
    })
      .on('error', reject)
      .end();
  });
}

/** Sum of one series' samples whose labels include every `match` pair. */
function sample(text: string, name: string, match: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_:]+)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const labels = Object.fromEntries(
      [...(m[3] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1]!, x[2]!]),
    );
    if (Object.entries(match).every(([k, v]) => labels[k] === v)) sum += Number(m[4]);
  }
  return sum;
}

/**
 * Prometheus metrics with the real parts: a docker-registry, the store on a FUSE mount, reads from
 * another process. The registry byte counter must agree with the registry's own access log.
 */
describe('metrics (real registry, real FUSE mount)', () => {
  let registry: TestRegistry;
  let dir: string;
  let mnt: string;
  let metrics: MetricsServer | undefined;
  let running: MountedStore | undefined;

  beforeAll(async () => {
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-metrics-int-'));
    mnt = join(dir, 'store');
    await mkdir(mnt);
  });

  afterAll(async () => {
    await running?.stop();
    await metrics?.close();
    disableMetrics();
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('serves the series on /metrics and counts registry bytes like the registry does', async () => {
    const small = Buffer.from('small file content\n');
    const big = randomBytes(2 << 20);
    const img = await appImage({ 'small.txt': small, 'big.bin': big });
    await pushImage(registry.url, 'test/metrics', 'v1', img);
    const logBefore = registry.log.length;

    resetMetrics();
    metrics = await startMetricsServer('127.0.0.1:0');
    running = await startMountedStore({
      root: join(dir, 'root'),
      mountpoint: mnt,
      requestTimeoutMs: 5000,
      layer: { backgroundFetch: false, prefetch: false },
    });
    const { cache, store } = running;
    setMetricSources({ cache: () => cache.stats(), layers: () => layerStateCounts(store.status()) });

    const ref = `${registry.host}/test/metrics:v1`;
    const diff = join(mnt, b64(ref), img.layers[0]!.descriptor.digest, 'diff');
    const r = await probe([
      { op: 'stat', path: diff },
      { op: 'read', path: join(diff, 'app', 'small.txt') },
      { op: 'sha256', path: join(diff, 'app', 'big.bin') },
      // second read of the same file: served from the cache
      { op: 'sha256', path: join(diff, 'app', 'big.bin') },
    ]);
    expect(Buffer.from((r[1] as { hex: string }).hex, 'hex').equals(small)).toBe(true);
    expect(r[2]).toEqual({ sha256: sha256(big), length: big.length });
    expect(r[3]).toEqual({ sha256: sha256(big), length: big.length });

    const res = await get(`http://${metrics.address}/metrics`);
    expect(res.status).toBe(200);
    expect(res.type).toContain('text/plain');
    const text = res.body;
    for (const name of [
      'stargz_store_fuse_operation_duration_seconds',
      'stargz_store_fuse_deadline_expiries_total',
      'stargz_store_registry_bytes_total',
      'stargz_store_registry_requests_total',
      'stargz_store_cache_bytes',
      'stargz_store_cache_hits_total',
      'stargz_store_cache_misses_total',
      'stargz_store_layers',
      'stargz_store_verification_failures_total',
      'stargz_store_background_bytes_total',
      'stargz_store_pinned_images',
    ]) {
      expect(text, name).toContain(`# TYPE ${name} `);
    }
    expect(
      sample(text, 'stargz_store_fuse_operation_duration_seconds_count', { operation: 'read' }),
    ).toBeGreaterThan(0);
    expect(
      sample(text, 'stargz_store_fuse_operation_duration_seconds_count', { operation: 'getattr' }),
    ).toBeGreaterThan(0);
    expect(sample(text, 'stargz_store_layers', { state: 'fetching' })).toBe(1);
    expect(sample(text, 'stargz_store_cache_bytes', { tier: 'disk' })).toBeGreaterThan(big.length);
    expect(sample(text, 'stargz_store_cache_hits_total')).toBeGreaterThan(0);
    expect(sample(text, 'stargz_store_cache_misses_total')).toBeGreaterThan(0);
    expect(sample(text, 'stargz_store_registry_requests_total', { host: registry.host })).toBeGreaterThan(0);
    // nothing secret or path-like in the labels
    expect(text).not.toContain('test/metrics');
    expect(text).not.toContain(b64(ref));

    const counted = sample(text, 'stargz_store_registry_bytes_total', { host: registry.host });

    // The registry's own count: the byte column of its access log, complete once it has exited.
    await registry.stop();
    let logged = 0;
    let lines = 0;
    for (const line of registry.log.slice(logBefore)) {
      const m = /"(GET|HEAD) \/v2\/[^"]* HTTP\/[\d.]+" (\d{3}) (\d+)/.exec(line);
      if (m === null) continue;
      lines++;
      logged += Number(m[3]);
    }
    expect(lines).toBeGreaterThan(0);
    expect(logged).toBeGreaterThan(big.length / 2);
    expect(Math.abs(counted - logged) / logged).toBeLessThan(0.05);
  });
});
