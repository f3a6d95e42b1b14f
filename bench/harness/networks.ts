import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { StoreError } from '../../src/util/errors.js';
import { onCleanup } from '../lib/cleanup.js';
import { createShapedNetns } from '../lib/netns.js';
import { sleep, say, tail } from '../lib/proc.js';
import { mbitToBytesPerSec, startShapingProxy } from '../lib/proxy.js';
import { startBenchRegistry, type BenchRegistry } from '../lib/registry-server.js';

/**
 * Network profiles. "loopback" talks to the registry directly. Shaped profiles put a link between
 * the clients (Podman, the store) and the registry:
 *  - shaper "proxy": our userspace proxy on 127.0.0.1 does rate and delay (its overhead is measured
 *    in the same run, see calibrate.ts);
 *  - shaper "htb": the registry runs in a namespace behind a veth with HTB on both ends (rate), the
 *    clients run in a second namespace, and the proxy there adds only the delay.
 */

export type Shaper = 'proxy' | 'htb';

export interface NetworkProfile {
  name: string;
  /** Mbit/s each way; undefined = unshaped. */
  rateMbit?: number;
  rttMs: number;
}

export const BUILTIN_NETWORKS: Record<string, NetworkProfile> = {
  loopback: { name: 'loopback', rttMs: 0 },
  '1gbit-10ms': { name: '1gbit-10ms', rateMbit: 1000, rttMs: 10 },
  '100mbit-30ms': { name: '100mbit-30ms', rateMbit: 100, rttMs: 30 },
};

/** "loopback", a built-in name, or "<rate>(mbit|gbit)-<rtt>ms" such as "50mbit-80ms". Pure. */
export function parseNetwork(spec: string): NetworkProfile {
  const b = BUILTIN_NETWORKS[spec];
  if (b) return b;
  const m = /^(\d+(?:\.\d+)?)(mbit|gbit)-(\d+(?:\.\d+)?)ms$/.exec(spec);
  if (!m)
    throw new StoreError(
      'E_CONFIG',
      `bad network profile "${spec}" (e.g. loopback, 100mbit-30ms, 1gbit-10ms)`,
    );
  const rate = Number(m[1]) * (m[2] === 'gbit' ? 1000 : 1);
  if (!(rate > 0)) throw new StoreError('E_CONFIG', `network profile "${spec}": rate must be > 0`);
  return { name: spec, rateMbit: rate, rttMs: Number(m[3]) };
}

export interface NetworkPath {
  profile: NetworkProfile;
  shaper: Shaper | 'none';
  /** host:port that clients put in image references. */
  refHost: string;
  /** argv prefix for clients (nsenter into the client namespace), empty when none. */
  prefix: string[];
  /** The registry whose access log counts this path's traffic. */
  registry: BenchRegistry;
  close(): Promise<void>;
}

export interface PathContext {
  /** The run's main registry (loopback). */
  registry: BenchRegistry;
  registryDataDir: string;
  confDir: string;
}

function repoRoot(): string {
  return fileURLToPath(new URL('../../../', import.meta.url));
}

export async function openNetworkPath(
  p: NetworkProfile,
  shaper: Shaper,
  ctx: PathContext,
): Promise<NetworkPath> {
  if (p.rateMbit === undefined && p.rttMs === 0) {
    return {
      profile: p,
      shaper: 'none',
      refHost: ctx.registry.host,
      prefix: [],
      registry: ctx.registry,
      close: async () => {},
    };
  }
  const [rhost, rport] = splitHost(ctx.registry.host);
  if (shaper === 'proxy') {
    const proxy = await startShapingProxy({
      targetHost: rhost,
      targetPort: rport,
      shape: { rateBytesPerSec: p.rateMbit ? mbitToBytesPerSec(p.rateMbit) : 0, delayMs: p.rttMs / 2 },
    });
    const undo = onCleanup(`proxy ${proxy.port}`, () => proxy.close());
    say(`network ${p.name}: userspace proxy 127.0.0.1:${proxy.port} -> ${ctx.registry.host}`);
    return {
      profile: p,
      shaper,
      refHost: `127.0.0.1:${proxy.port}`,
      prefix: [],
      registry: ctx.registry,
      close: undo,
    };
  }
  // htb: registry in the server namespace (same data dir), clients in the client namespace
  const ns = await createShapedNetns(p.rateMbit ?? 10_000);
  let reg: BenchRegistry | undefined;
  let stopProxy: (() => Promise<void>) | undefined;
  try {
    reg = await startBenchRegistry({
      dataDir: ctx.registryDataDir,
      confDir: ctx.confDir,
      address: ns.serverIp,
      port: 5000,
      netns: ns.serverNs,
    });
    const proxyArgv = ns.inClient([
      process.execPath,
      `${repoRoot()}dist/bench/lib/proxy-main.js`,
      '--listen',
      '127.0.0.1:0',
      '--target',
      reg.host,
      '--delay-ms',
      String(p.rttMs / 2),
    ]);
    const child = spawn(proxyArgv[0]!, proxyArgv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    stopProxy = onCleanup(`netns proxy pid ${String(child.pid)}`, async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await Promise.race([new Promise((r) => child.once('exit', r)), sleep(3000)]);
      }
    });
    const port = await new Promise<number>((resolve, reject) => {
      const rl = createInterface({ input: child.stdout! });
      rl.once('line', (line) => resolve((JSON.parse(line) as { port: number }).port));
      child.once('exit', (c) =>
        reject(new StoreError('E_IO', `delay proxy exited (${String(c)}): ${tail(err)}`)),
      );
    });
    say(
      `network ${p.name}: netns ${ns.clientNs} -> HTB veth -> registry ${reg.host} in ${ns.serverNs}, delay proxy :${port}`,
    );
    return {
      profile: p,
      shaper,
      refHost: `127.0.0.1:${port}`,
      prefix: ns.inClient([]),
      registry: reg,
      close: async () => {
        await stopProxy?.();
        await reg?.stop();
        await ns.destroy();
      },
    };
  } catch (e) {
    await stopProxy?.();
    await reg?.stop();
    await ns.destroy();
    throw e;
  }
}

export function splitHost(host: string): [string, number] {
  const i = host.lastIndexOf(':');
  return [host.slice(0, i), Number(host.slice(i + 1))];
}
