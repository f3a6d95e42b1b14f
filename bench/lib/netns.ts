import { StoreError } from '../../src/util/errors.js';
import { onCleanup } from './cleanup.js';
import { run, say } from './proc.js';

/**
 * A shaped link between two network namespaces the harness creates: "client" (Podman, the store,
 * the delaying proxy) and "server" (the registry), joined by a veth pair whose two ends each carry an
 * HTB qdisc limiting egress to the link rate. Only addresses inside these namespaces are used.
 * Deleting the namespaces on cleanup removes the veth pair and every qdisc with it.
 */

export const NS_PREFIX = 'sgzb-';

export interface ShapedNetns {
  clientNs: string;
  serverNs: string;
  clientIp: string;
  serverIp: string;
  rateMbit: number;
  /** argv prefix that runs a command in the client namespace (same mount namespace). */
  inClient(argv: string[]): string[];
  inServer(argv: string[]): string[];
  destroy(): Promise<void>;
}

/** HTB commands for one interface (pure, for tests and for the report). */
export function htbCommands(dev: string, rateMbit: number): string[][] {
  // explicit quantum: at Gbit rates the default (rate / r2q) overflows and tc warns
  return [
    ['tc', 'qdisc', 'add', 'dev', dev, 'root', 'handle', '1:', 'htb', 'default', '10'],
    [
      'tc',
      'class',
      'add',
      'dev',
      dev,
      'parent',
      '1:',
      'classid',
      '1:10',
      'htb',
      'rate',
      `${rateMbit}mbit`,
      'ceil',
      `${rateMbit}mbit`,
      'quantum',
      '60000',
    ],
  ];
}

export async function createShapedNetns(rateMbit: number): Promise<ShapedNetns> {
  const tag = `${process.pid % 100000}`;
  const clientNs = `${NS_PREFIX}${tag}-c`;
  const serverNs = `${NS_PREFIX}${tag}-r`;
  const devC = `sgzb${tag}c`;
  const devR = `sgzb${tag}r`;
  const clientIp = '10.254.0.1';
  const serverIp = '10.254.0.2';
  const inNs = (ns: string, argv: string[]) => ['nsenter', `--net=/run/netns/${ns}`, ...argv];
  const sh = async (argv: string[]) => {
    await run(argv[0]!, argv.slice(1));
  };
  const destroy = async () => {
    for (const [ns, dev] of [
      [clientNs, devC],
      [serverNs, devR],
    ] as const) {
      await run('ip', ['netns', 'exec', ns, 'tc', 'qdisc', 'del', 'dev', dev, 'root'], { allowFail: true });
    }
    await run('ip', ['netns', 'exec', clientNs, 'ip', 'link', 'del', devC], { allowFail: true });
    await run('ip', ['netns', 'del', clientNs], { allowFail: true });
    await run('ip', ['netns', 'del', serverNs], { allowFail: true });
  };
  const undo = onCleanup(`netns ${clientNs}/${serverNs}`, destroy);
  try {
    await sh(['ip', 'netns', 'add', clientNs]);
    await sh(['ip', 'netns', 'add', serverNs]);
    await sh([
      'ip',
      'link',
      'add',
      devC,
      'netns',
      clientNs,
      'type',
      'veth',
      'peer',
      'name',
      devR,
      'netns',
      serverNs,
    ]);
    for (const [ns, dev, ip] of [
      [clientNs, devC, clientIp],
      [serverNs, devR, serverIp],
    ] as const) {
      await sh(['ip', 'netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
      await sh(['ip', 'netns', 'exec', ns, 'ip', 'addr', 'add', `${ip}/30`, 'dev', dev]);
      await sh(['ip', 'netns', 'exec', ns, 'ip', 'link', 'set', dev, 'up']);
      for (const cmd of htbCommands(dev, rateMbit)) await sh(['ip', 'netns', 'exec', ns, ...cmd]);
    }
  } catch (err) {
    await undo();
    throw new StoreError('E_IO', `cannot create the shaped namespace link: ${(err as Error).message}`, {
      clientNs,
      serverNs,
    });
  }
  say(`netns link ${clientNs} <-> ${serverNs}: HTB ${rateMbit} Mbit/s each way`);
  return {
    clientNs,
    serverNs,
    clientIp,
    serverIp,
    rateMbit,
    inClient: (argv) => inNs(clientNs, argv),
    inServer: (argv) => inNs(serverNs, argv),
    destroy: undo,
  };
}

/** Remove namespaces left by a harness process that no longer exists (name carries its pid). */
export async function removeStaleNamespaces(): Promise<string[]> {
  const r = await run('ip', ['netns', 'list'], { allowFail: true });
  const removed: string[] = [];
  for (const line of r.stdout.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${NS_PREFIX}(\\d+)-[cr]$`).exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (pid === process.pid % 100000) continue;
    if (await pidAlive(pid)) continue;
    await run('ip', ['netns', 'del', name], { allowFail: true });
    removed.push(name);
  }
  return removed;
}

async function pidAlive(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
