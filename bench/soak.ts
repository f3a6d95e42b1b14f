/**
 * Soak (issue 14): `npm run soak -- --minutes N [--out DIR] [--concurrency K]`.
 *
 * Starts a local docker-registry and the store (bin/stargz-store.js, Additional Layer Store for a
 * private podman), pushes busybox images with a random payload in every format (eStargz,
 * zstd:chunked, gzip), then loops until the time is up: pull, run (the container prints the
 * sha256 of its payload, checked against the source: wrong bytes count as errors), rmi; K images
 * at a time. Every 10 s it samples the store's RSS and open fds, the cache's bytes on disk and the
 * p99 latency of a client prober (stat + readdir of the mount every 250 ms). Writes
 * `<out>/soak.json` and `<out>/soak.svg`.
 */
import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { buildBusyboxImage, type ImageFormat } from './lib/busybox-image.js';
import { installSignalCleanup, onCleanup, runCleanups } from './lib/cleanup.js';
import { PodmanEnv } from './lib/podman.js';
import { say } from './lib/proc.js';
import { startBenchRegistry } from './lib/registry-server.js';
import { startStore } from './lib/store-process.js';
import { escapeXml, niceMax } from './harness/svg.js';

/** A pull, run or rmi taking longer than this counts as an error (and is killed). */
const STEP_TIMEOUT_MS = 5 * 60_000;

interface Sample {
  t: number;
  rssMiB: number;
  fds: number;
  cacheMiB: number;
  probeP99Ms: number;
  runs: number;
  errors: number;
}

interface Options {
  minutes: number;
  out: string;
  concurrency: number;
}

function parseArgs(argv: string[]): Options {
  const o: Options = { minutes: 30, out: join('bench', 'out', 'soak'), concurrency: 2 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const v = argv[i + 1];
    if (a === '--minutes' && v !== undefined) o.minutes = Number(v);
    else if (a === '--out' && v !== undefined) o.out = v;
    else if (a === '--concurrency' && v !== undefined) o.concurrency = Number(v);
    else continue;
    i++;
  }
  if (!(o.minutes > 0) || !(o.concurrency >= 1))
    throw new Error('usage: soak --minutes N [--out DIR] [--concurrency K]');
  return o;
}

async function procStatus(pid: number): Promise<{ rssKiB: number; fds: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  const fds = (await readdir(`/proc/${pid}/fd`)).length;
  return { rssKiB: rss, fds };
}

async function duBytes(dir: string): Promise<number> {
  let total = 0;
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch {
    return 0;
  }
  for (const e of entries) {
    const p = join(dir, e);
    const st = await lstat(p).catch(() => undefined);
    if (!st) continue;
    total += st.isDirectory() ? await duBytes(p) : st.blocks * 512;
  }
  return total;
}

function p99(xs: number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))]!;
}

/** One line chart per series, stacked, self-contained SVG. */
function renderSoakChart(samples: readonly Sample[]): string {
  const series: Array<[string, (s: Sample) => number, string]> = [
    ['store RSS (MiB)', (s) => s.rssMiB, '#3b6fb6'],
    ['open fds', (s) => s.fds, '#f29e38'],
    ['cache on disk (MiB)', (s) => s.cacheMiB, '#4f9d69'],
    ['mount probe p99 (ms)', (s) => s.probeP99Ms, '#c44e52'],
  ];
  const W = 900;
  const H = 150;
  const PAD = 50;
  const tMax = Math.max(1, ...samples.map((s) => s.t));
  const panels = series.map(([name, f, color], i) => {
    const top = 30 + i * (H + 30);
    const yMax = niceMax(Math.max(0, ...samples.map(f)));
    const pts = samples
      .map(
        (s) =>
          `${(PAD + (s.t / tMax) * (W - 2 * PAD)).toFixed(1)},${(top + H - (f(s) / yMax) * H).toFixed(1)}`,
      )
      .join(' ');
    return (
      `<text x="${PAD}" y="${top - 6}" font-size="12">${escapeXml(name)} (max axis ${yMax})</text>` +
      `<rect x="${PAD}" y="${top}" width="${W - 2 * PAD}" height="${H}" fill="none" stroke="#ccc"/>` +
      `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${pts}"/>`
    );
  });
  const height = 30 + series.length * (H + 30);
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" font-family="sans-serif">` +
    `<text x="${PAD}" y="16" font-size="13">stargz-store soak: ${samples.length} samples over ${(tMax / 60).toFixed(1)} min</text>` +
    panels.join('') +
    `</svg>\n`
  );
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  installSignalCleanup();
  const repoRoot = resolve(new URL('../..', import.meta.url).pathname);
  const work = await mkdtemp(join(tmpdir(), 'sgz-soak-'));
  onCleanup('soak work dir', () => rm(work, { recursive: true, force: true }));
  const registry = await startBenchRegistry({ dataDir: join(work, 'registry'), confDir: work });
  onCleanup('registry', () => registry.stop());

  // payloads: random files; the container prints the sha256 of their concatenation
  const images: Array<{ ref: string; want: string; format: ImageFormat }> = [];
  for (const [i, format] of (
    ['estargz', 'zstd:chunked', 'gzip', 'estargz', 'zstd:chunked'] as const
  ).entries()) {
    const dir = join(work, `payload-${i}`);
    await mkdir(dir, { recursive: true });
    const h = createHash('sha256');
    for (let f = 0; f < 6; f++) {
      const data = randomBytes((f + 1) * 300_000);
      await writeFile(join(dir, `f${f}.bin`), data);
      h.update(data);
    }
    const r = await buildBusyboxImage({
      registry: registry.host,
      repo: `soak/app${i}`,
      tag: format.replace(':', '-'),
      format,
      files: [{ src: dir, dest: '/data' }],
      cmd: [
        'sh',
        '-c',
        'cat /data/f0.bin /data/f1.bin /data/f2.bin /data/f3.bin /data/f4.bin /data/f5.bin | sha256sum',
      ],
    });
    images.push({ ref: r.ref, want: h.digest('hex'), format });
    say(`pushed ${r.ref}`);
  }

  const storeRoot = join(work, 'store-root');
  const mnt = join(work, 'store');
  const config = join(work, 'store.toml');
  await writeFile(config, '# soak: store defaults\n');
  const store = await startStore({
    command: [process.execPath, join(repoRoot, 'bin', 'stargz-store.js')],
    root: storeRoot,
    mountpoint: mnt,
    addr: join(work, 'store.sock'),
    config,
    logFile: join(work, 'store.log'),
  });
  onCleanup('store', async () => {
    await store.stop();
  });
  // One Podman storage per lane: Podman 4.3.1 deadlocks on two concurrent ALS pulls into ONE
  // storage (storage.lock vs layers.lock, store idle), so lanes that share a storage would test
  // Podman's locking, not the store. Separate storages share the one store mount concurrently.
  const lanes: PodmanEnv[] = [];
  for (let i = 0; i < o.concurrency; i++) {
    const lane = await PodmanEnv.create({
      dir: join(work, `p${i}`),
      storage: { kind: 'als', mount: mnt },
      insecureRegistries: [registry.host],
    });
    lanes.push(lane);
    onCleanup(`podman ${i}`, () => lane.destroy());
  }

  const started = performance.now();
  const endAt = started + o.minutes * 60_000;
  let runs = 0;
  let errors = 0;
  const failures: string[] = [];
  const latencies: number[] = [];
  const samples: Sample[] = [];
  let done = false;

  const prober = (async () => {
    while (!done) {
      const t0 = performance.now();
      await stat(mnt)
        .then(() => readdir(mnt))
        .catch(() => undefined);
      latencies.push(performance.now() - t0);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const sampler = (async () => {
    while (!done) {
      const ps = await procStatus(store.pid).catch(() => ({ rssKiB: 0, fds: 0 }));
      samples.push({
        t: Math.round((performance.now() - started) / 1000),
        rssMiB: Math.round(ps.rssKiB / 102.4) / 10,
        fds: ps.fds,
        cacheMiB: Math.round((await duBytes(join(storeRoot, 'cache'))) / 104857.6) / 10,
        probeP99Ms: Math.round(p99(latencies.splice(0)) * 10) / 10,
        runs,
        errors,
      });
      const s = samples.at(-1)!;
      say(
        `t=${s.t}s rss=${s.rssMiB}MiB fds=${s.fds} cache=${s.cacheMiB}MiB p99=${s.probeP99Ms}ms runs=${runs} errors=${errors}`,
      );
      const wait = Date.now() + 10_000;
      while (!done && Date.now() < wait) await new Promise((r) => setTimeout(r, 250));
    }
  })();

  const cycle = async (podman: PodmanEnv, img: (typeof images)[number]): Promise<void> => {
    try {
      await podman.pull(img.ref, STEP_TIMEOUT_MS);
      const r = await podman.runImage(img.ref, STEP_TIMEOUT_MS);
      if (!r.output.includes(img.want))
        throw new Error(`wrong payload digest: ${r.output.trim().slice(0, 200)}`);
      await podman.podman(['rmi', '-f', img.ref], { timeoutMs: STEP_TIMEOUT_MS });
      runs++;
    } catch (err) {
      errors++;
      failures.push(`${img.ref}: ${String((err as Error).message ?? err).slice(0, 300)}`);
      say(`error: ${failures.at(-1)}`);
    }
  };
  // Lanes run independently (lane i starts at image i), so pulls and runs of the same and of
  // different images overlap at every phase.
  await Promise.all(
    lanes.map(async (podman, lane) => {
      let next = lane;
      while (performance.now() < endAt) await cycle(podman, images[next++ % images.length]!);
    }),
  );
  done = true;
  await Promise.all([prober, sampler]);

  // warm-up: the first 2 minutes (or the first 20% of a shorter run)
  const warmupSec = Math.min(120, o.minutes * 60 * 0.2);
  const warm = samples.filter((s) => s.t >= warmupSec);
  const base = warm[0] ?? samples[0];
  const last = samples.at(-1);
  const growth = (f: (s: Sample) => number): number =>
    base && last && f(base) > 0 ? Math.round(((f(last) - f(base)) / f(base)) * 1000) / 10 : 0;
  const result = {
    minutes: o.minutes,
    concurrency: o.concurrency,
    images: images.map((i) => ({ ref: i.ref, format: i.format })),
    runs,
    errors,
    failures,
    warmupSec,
    rssGrowthPctAfterWarmup: growth((s) => s.rssMiB),
    fdGrowthPctAfterWarmup: growth((s) => s.fds),
    maxCacheMiB: Math.max(0, ...samples.map((s) => s.cacheMiB)),
    samples,
  };
  await mkdir(o.out, { recursive: true });
  await writeFile(join(o.out, 'soak.json'), JSON.stringify(result, null, 1));
  await writeFile(join(o.out, 'soak.svg'), renderSoakChart(samples));
  say(
    `soak: ${runs} runs, ${errors} errors; RSS growth after warm-up ${result.rssGrowthPctAfterWarmup}%, ` +
      `fds ${result.fdGrowthPctAfterWarmup}%, cache max ${result.maxCacheMiB} MiB -> ${o.out}/soak.{json,svg}`,
  );
  await runCleanups();
  if (errors > 0) process.exitCode = 1;
}

main().catch(async (err: unknown) => {
  console.error(err);
  await runCleanups().catch(() => undefined);
  process.exit(1);
});
