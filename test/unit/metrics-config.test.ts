import { describe, expect, it } from 'vitest';
import { buildConfig } from '../../src/store/config/load.js';
import { parseMetricsAddress } from '../../src/store/metrics-server.js';
import { layerStateCounts } from '../../src/store/metrics-sources.js';
import {
  disableMetrics,
  enableMetrics,
  renderMetrics,
  resetMetrics,
  timeFuseOp,
} from '../../src/util/metrics.js';
import { DigestMismatchError, StoreError } from '../../src/util/errors.js';

describe('metrics_address', () => {
  it('is off by default, read from the file, and the flag wins', () => {
    expect(buildConfig(undefined, { mountpoint: '/m' }).config.metricsAddress).toBe('');
    const file = 'metrics_address = "127.0.0.1:9402"\n';
    const fromFile = buildConfig(file, { mountpoint: '/m' });
    expect(fromFile.config.metricsAddress).toBe('127.0.0.1:9402');
    expect(fromFile.warnings).toEqual([]);
    const flagged = buildConfig(file, { mountpoint: '/m', metricsAddress: '[::1]:9000' });
    expect(flagged.config.metricsAddress).toBe('[::1]:9000');
    expect(flagged.warnings).toEqual([]);
  });

  it('rejects an address that is not host:port with a typed error naming the key', () => {
    expect(() => buildConfig('metrics_address = "9402"\n', { mountpoint: '/m' })).toThrow(
      /metrics address must be host:port/,
    );
    expect(() => buildConfig(undefined, { mountpoint: '/m', metricsAddress: 'h:70000' })).toThrow(StoreError);
    expect(parseMetricsAddress(':9402')).toEqual({ host: '0.0.0.0', port: 9402 });
    expect(parseMetricsAddress('[::1]:1')).toEqual({ host: '::1', port: 1 });
  });
});

describe('recording', () => {
  it('times FUSE operations, counts deadline expiries and verification failures only while on', async () => {
    resetMetrics();
    await timeFuseOp('read', Promise.resolve(1));
    new DigestMismatchError('chunk', 'sha256:a', 'sha256:b');
    let text = (await renderMetrics()).body;
    expect(text).not.toContain('operation="read"');
    expect(text).not.toContain('what="chunk"');

    enableMetrics();
    try {
      await timeFuseOp('read', Promise.resolve(1));
      const late = timeFuseOp('lookup', Promise.reject(new StoreError('E_DEADLINE', 'late')));
      await expect(late).rejects.toThrow('late');
      new DigestMismatchError('chunk', 'sha256:a', 'sha256:b');
      text = (await renderMetrics()).body;
      expect(text).toContain('stargz_store_fuse_operation_duration_seconds_count{operation="read"} 1');
      expect(text).toContain('stargz_store_fuse_deadline_expiries_total{operation="lookup"} 1');
      expect(text).toContain('stargz_store_verification_failures_total{what="chunk"} 1');
    } finally {
      disableMetrics();
    }
  });

  it('sorts layers into states', () => {
    const row = { ref: 'r', digest: 'd', bytesFetched: 0, percent: 0, refs: 0 };
    expect(
      layerStateCounts([
        { ...row, lazy: true, verified: true },
        { ...row, lazy: true, verified: false },
        { ...row, lazy: true, verified: false, lastError: 'x' },
        { ...row, lazy: false, verified: false, reason: 'resolving' },
        { ...row, lazy: false, verified: false, reason: 'not lazy: plain gzip' },
      ]),
    ).toEqual({ resolving: 1, fetching: 1, verified: 1, error: 1, not_lazy: 1 });
  });
});
