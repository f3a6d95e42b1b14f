import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { onCleanup } from '../lib/cleanup.js';
import { unmountUnder } from '../lib/mounts.js';
import { PodmanEnv } from '../lib/podman.js';
import { say, tail } from '../lib/proc.js';
import type { LazyRunInfo } from '../lib/profile.js';
import { startStore, type RunningStore } from '../lib/store-process.js';
import type { PushedImage } from './formats.js';
import type { StoreCommand } from './modes.js';
import type { Workload } from './workloads.js';

/**
 * The `store` profile source's run: the unoptimised eStargz image pulled and run once (loopback,
 * fresh Podman storage) through our store started with `--record-accesses`. Every layer must be
 * served lazily, or files of a normally pulled layer would be missing from the record.
 */

const TOC_ANNOTATION = 'containerd.io/snapshot/stargz/toc.digest';

export interface RecordedRunOptions {
  workDir: string;
  /** host:port of the bench registry (plain HTTP). */
  registryHost: string;
  store: StoreCommand;
  workload: Workload;
  /** The pushed unoptimised eStargz image of the workload. */
  image: PushedImage;
  recordFile: string;
}

export async function recordedLazyRun(o: RecordedRunOptions): Promise<LazyRunInfo> {
  // short, like the iteration dirs: Podman 4.3 stalls when its runroot path is long
  const dir = join(o.workDir, 'r', 'prof');
  await unmountUnder(dir);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const mnt = join(dir, 'm');
  let store: RunningStore | undefined;
  let podman: PodmanEnv | undefined;
  const teardown = onCleanup(`profile run ${dir}`, async () => {
    if (podman) await podman.destroy().catch(() => undefined);
    // SIGTERM: the store unmounts and flushes its access record before exiting
    const stopped = store ? await store.stop() : undefined;
    await unmountUnder(dir);
    await rm(dir, { recursive: true, force: true, maxRetries: 3 }).catch(() => undefined);
    if (stopped && stopped.exitCode !== 0) {
      throw new StoreError(
        'E_IO',
        `profile store did not stop cleanly (exit ${String(stopped.exitCode)}, signal ${String(stopped.signal)}): its access record may be incomplete`,
      );
    }
  });
  try {
    let config = o.store.config;
    if (!config) {
      config = join(dir, 'store-config.toml');
      await writeFile(config, '# sgz benchmark: store defaults (access profile run)\n');
    }
    store = await startStore({
      // a serve flag: appended after the store command, before the harness's own flags
      command: [...o.store.argv, '--record-accesses', o.recordFile],
      root: join(dir, 'store-root'),
      mountpoint: mnt,
      addr: join(dir, 'store.sock'),
      config,
      logLevel: o.store.logLevel,
      stopSignal: o.store.stopSignal,
      logFile: `${o.recordFile}.store.log`,
    });
    podman = await PodmanEnv.create({
      dir: join(dir, 'p'),
      storage: { kind: 'als', mount: mnt },
      insecureRegistries: [o.registryHost],
    });
    const ref = `${o.registryHost}/${o.image.repo}:${o.image.tag}`;
    const pullMs = await podman.pull(ref);
    const c = await podman.alsLayerCount(mnt);
    if (c.total === 0 || c.lazy !== c.total) {
      throw new StoreError(
        'E_IO',
        `profile run: only ${c.lazy} of ${c.total} layers of ${ref} were served by the store; the record would miss files`,
        { ref },
      );
    }
    const r = await podman.runImage(ref);
    const missing = o.workload.expect.filter((e) => !r.output.includes(e));
    if (missing.length > 0) {
      throw new StoreError('E_IO', `profile run printed unexpected output: ${tail(r.output, 400)}`, { ref });
    }
    say(
      `  profile run of ${ref}: pull ${(pullMs / 1000).toFixed(2)} s, run ${(r.ms / 1000).toFixed(2)} s (${c.lazy} lazy layers)`,
    );
  } catch (err) {
    const log = store ? ` | store log: ${store.logTail(600)}` : '';
    await teardown().catch(() => undefined);
    throw err instanceof StoreError
      ? new StoreError(err.code, err.message + log, err.context)
      : new StoreError('E_IO', `${(err as Error).message}${log}`);
  }
  await teardown();
  return {
    layerDigests: o.image.layers.map((l) => {
      const toc = l.annotations?.[TOC_ANNOTATION];
      return toc ? [l.digest, toc] : [l.digest];
    }),
  };
}
