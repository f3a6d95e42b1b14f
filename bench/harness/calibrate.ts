import { run } from '../lib/proc.js';
import { startShapingProxy } from '../lib/proxy.js';
import { percentile } from '../lib/stats.js';
import type { NetworkPath } from './networks.js';
import { splitHost } from './networks.js';

/**
 * Calibration measured in the same run as the benchmark:
 *  - the shaping proxy's own overhead on loopback: a blob range fetched directly and through an
 *    unshaped (pass-through) proxy;
 *  - per shaped network: the achieved throughput and the time to first byte of a fresh request
 *    (connection set-up + request: about 2 RTT by design).
 * curl is the client (independent of our code), run in the client namespace for the htb shaper.
 */

export interface CurlSample {
  bytes: number;
  seconds: number;
  ttfbMs: number;
  mbitPerSec: number;
}

export async function curlGet(
  url: string,
  rangeBytes: number | undefined,
  prefix: string[] = [],
): Promise<CurlSample> {
  const argv = [
    ...prefix,
    'curl',
    '-sS',
    '-o',
    '/dev/null',
    ...(rangeBytes !== undefined ? ['-H', `Range: bytes=0-${rangeBytes - 1}`] : []),
    '-w',
    '%{http_code} %{size_download} %{time_total} %{time_starttransfer}',
    url,
  ];
  const r = await run(argv[0]!, argv.slice(1), { timeoutMs: 10 * 60_000 });
  const [code, size, total, ttfb] = r.stdout.trim().split(' ').map(Number);
  if (!(code! >= 200 && code! < 300)) throw new Error(`curl ${url}: HTTP ${String(code)}`);
  return {
    bytes: size!,
    seconds: total!,
    ttfbMs: ttfb! * 1000,
    mbitPerSec: (size! * 8) / 1e6 / Math.max(total!, 1e-6),
  };
}

export interface ProxyOverhead {
  bytes: number;
  directMbit: number;
  proxiedMbit: number;
  /** 1 - proxied/direct throughput (p50 of 3 each). */
  throughputLoss: number;
  directTtfbMs: number;
  proxiedTtfbMs: number;
}

export async function measureProxyOverhead(
  registryHost: string,
  blobUrlPath: string,
  blobSize: number,
): Promise<ProxyOverhead> {
  const bytes = Math.min(blobSize, 256 * 1024 * 1024);
  const [host, port] = splitHost(registryHost);
  const proxy = await startShapingProxy({ targetHost: host, targetPort: port, shape: { delayMs: 0 } });
  try {
    const direct: CurlSample[] = [];
    const proxied: CurlSample[] = [];
    for (let i = 0; i < 3; i++) {
      direct.push(await curlGet(`http://${registryHost}${blobUrlPath}`, bytes));
      proxied.push(await curlGet(`http://127.0.0.1:${proxy.port}${blobUrlPath}`, bytes));
    }
    const med = (a: CurlSample[], f: (s: CurlSample) => number) => percentile(a.map(f), 50);
    const d = med(direct, (s) => s.mbitPerSec);
    const p = med(proxied, (s) => s.mbitPerSec);
    return {
      bytes,
      directMbit: d,
      proxiedMbit: p,
      throughputLoss: 1 - p / d,
      directTtfbMs: med(direct, (s) => s.ttfbMs),
      proxiedTtfbMs: med(proxied, (s) => s.ttfbMs),
    };
  } finally {
    await proxy.close();
  }
}

export interface LinkCheck {
  network: string;
  targetMbit?: number;
  targetRttMs: number;
  bytes: number;
  achievedMbit: number;
  /** Fresh connection, GET /v2/: ~2 RTT expected (set-up + request). */
  ttfbMs: number;
}

export async function checkLink(
  path: NetworkPath,
  blobUrlPath: string,
  blobSize: number,
): Promise<LinkCheck> {
  const rate = path.profile.rateMbit;
  // about 3 s of transfer at the nominal rate, at most the blob
  const bytes = Math.min(blobSize, rate ? Math.floor((rate * 1e6 * 3) / 8) : 64 * 1024 * 1024);
  const ping = await curlGet(`http://${path.refHost}/v2/`, undefined, path.prefix);
  const s = await curlGet(`http://${path.refHost}${blobUrlPath}`, bytes, path.prefix);
  return {
    network: path.profile.name,
    ...(rate ? { targetMbit: rate } : {}),
    targetRttMs: path.profile.rttMs,
    bytes: s.bytes,
    achievedMbit: s.mbitPerSec,
    ttfbMs: ping.ttfbMs,
  };
}
