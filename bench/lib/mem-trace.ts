/**
 * Where a store's Buffer memory goes, from inside the process: a diagnostic preloaded into the
 * store (never part of it), for the question every peak-RSS figure raises once rss-parts.ts says
 * "Buffers": which ones, and are they live or garbage waiting for a collection?
 *
 *   MEM_TRACE=/tmp/trace NODE_OPTIONS="--import $PWD/dist/bench/lib/mem-trace.js" bin/stargz-store ...
 *
 * Writes two files, rewritten as the store runs:
 * - `<MEM_TRACE>.series`: every 100 ms, seconds since start, RSS, V8 heap used / total, external
 *   and ArrayBuffer MB (process.memoryUsage(); lines starting `PEAK` raised the RSS peak).
 * - `<MEM_TRACE>.peak`: at the latest RSS peak, the tracked Buffers still alive, MB by site
 *   (which of them made the peak: live data, or garbage not yet found collected).
 * - `<MEM_TRACE>.sites`: Buffers of 32 KiB and more by allocation site (Buffer.alloc,
 *   allocUnsafe, allocUnsafeSlow, concat: Node's own zlib and fs allocate through them too), with
 *   the MB that were released early (detached: util/release-buffer.ts) and the MB that waited for
 *   the garbage collector, largest first. A site high on the second count is memory the paced GC
 *   (util/gc-pacer.ts) has to catch up with.
 * The hook costs a stack trace per large allocation and a scan every 50 ms: for diagnosis only.
 * Only a process whose arguments include `--root` (the store, not npm or the launcher) is traced.
 */
import { openSync, writeFileSync, writeSync } from 'node:fs';

const target = process.env['MEM_TRACE'];
if (target !== undefined && target !== '' && process.argv.some((a) => a.startsWith('--root'))) {
  const sites = traceSites(`${target}.sites`);
  traceSeries(`${target}.series`, () => writeLive(`${target}.peak`, sites));
}

function traceSeries(path: string, onPeak: () => void): void {
  const fd = openSync(path, 'w');
  const t0 = performance.now();
  let peak = 0;
  const mb = (n: number): string => (n / 1e6).toFixed(1);
  setInterval(() => {
    const m = process.memoryUsage();
    const secs = ((performance.now() - t0) / 1000).toFixed(1);
    const line = `${secs} rss ${mb(m.rss)} heapUsed ${mb(m.heapUsed)} heapTotal ${mb(m.heapTotal)} external ${mb(m.external)} arrayBuffers ${mb(m.arrayBuffers)}\n`;
    writeSync(fd, m.rss > peak ? `PEAK ${line}` : line);
    if (m.rss > peak) onPeak();
    peak = Math.max(peak, m.rss);
  }, 100).unref();
}

interface Site {
  n: number;
  bytes: number;
  released: number;
  collected: number;
  /** Tracked and neither released nor found collected yet. */
  live: number;
}

function writeLive(path: string, sites: Map<string, Site>): void {
  const rows = [...sites].filter(([, s]) => s.live > 0).sort((a, b) => b[1].live - a[1].live);
  const total = rows.reduce((n, [, s]) => n + s.live, 0);
  const lines = rows.slice(0, 15).map(([k, s]) => `live ${(s.live / 1e6).toFixed(1)} MB: ${k}`);
  writeFileSync(path, [`live ${(total / 1e6).toFixed(1)} MB in all`, ...lines].join('\n') + '\n');
}

function traceSites(path: string): Map<string, Site> {
  const MIN = 32 * 1024;
  const sites = new Map<string, Site>();
  let tracked: Array<{ ref: WeakRef<ArrayBufferLike>; site: Site; n: number }> = [];
  const siteOf = (): string =>
    (new Error().stack ?? '')
      .split('\n')
      .slice(3, 12)
      .map((l) =>
        l
          .trim()
          .replace(/^at /, '')
          .replace(/file:\/\/\S*\/dist\//, ''),
      )
      .join(' < ');
  const track = (b: Buffer, kind: string): Buffer => {
    const ab = b.buffer;
    if (ab.byteLength < MIN) return b;
    const key = `${kind} ${siteOf()}`;
    let site = sites.get(key);
    if (site === undefined) sites.set(key, (site = { n: 0, bytes: 0, released: 0, collected: 0, live: 0 }));
    site.n++;
    site.bytes += ab.byteLength;
    site.live += ab.byteLength;
    tracked.push({ ref: new WeakRef(ab), site, n: ab.byteLength });
    return b;
  };
  type Maker = (...args: never[]) => Buffer;
  const B = Buffer as unknown as Record<string, Maker>;
  for (const name of ['alloc', 'allocUnsafe', 'allocUnsafeSlow', 'concat']) {
    const original = B[name]!;
    B[name] = function (this: unknown, ...args: never[]): Buffer {
      return track(original.apply(this, args), name);
    };
  }
  setInterval(() => {
    tracked = tracked.filter((t) => {
      const ab = t.ref.deref() as (ArrayBufferLike & { detached?: boolean }) | undefined;
      if (ab === undefined) t.site.collected += t.n;
      else if (ab.detached === true) t.site.released += t.n;
      else return true;
      t.site.live -= t.n;
      return false;
    });
  }, 50).unref();
  const mb = (n: number): string => (n / 1e6).toFixed(1);
  setInterval(() => {
    const rows = [...sites].sort((a, b) => b[1].collected - a[1].collected).slice(0, 30);
    writeFileSync(
      path,
      rows
        .map(
          ([k, s]) =>
            `collected ${mb(s.collected)} released ${mb(s.released)} of ${mb(s.bytes)} MB in ${s.n}: ${k}`,
        )
        .join('\n') + '\n',
    );
  }, 2000).unref();
  return sites;
}
