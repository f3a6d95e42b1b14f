import { createRequire } from 'node:module';
import { formatBytes } from '../util/format-bytes.js';

/**
 * Progress for long one-shot work (`layer build`, `pin --wait`, `check`, bench runs): live bars
 * (cli-progress) on a terminal, nothing otherwise: pipes, CI logs and scripts get only the
 * command's result. cli-progress is loaded only on a TTY.
 */
export interface Progress {
  /** Done so far (and the total, when it becomes known or changes). */
  update(done: number, total?: number): void;
  stop(): void;
}

/** Several bars at once, one per key (an image of `pin --wait`), redrawn on each `set`. */
export interface MultiProgress {
  set(key: string, done: number, total: number, status: string): void;
  stop(): void;
}

/** What the bars need of a stream; a test passes a fake with `isTTY`. */
export type ProgressStream = Pick<NodeJS.WriteStream, 'write'> & { isTTY?: boolean; columns?: number };

/** The one decision: bars only when the stream is a terminal. */
export function wantsProgress(stream: { isTTY?: boolean }): boolean {
  return stream.isTTY === true;
}

const NONE: Progress = { update: () => undefined, stop: () => undefined };
const NONE_MULTI: MultiProgress = { set: () => undefined, stop: () => undefined };

interface BarLike {
  start(total: number, value: number, payload?: Record<string, unknown>): void;
  update(value: number, payload?: Record<string, unknown>): void;
  setTotal(total: number): void;
  stop(): void;
}
interface MultiBarLike {
  create(total: number, value: number, payload?: Record<string, unknown>): BarLike;
  /** Redraws every bar now (cli-progress otherwise redraws on its own timer). */
  update(): void;
  stop(): void;
}
interface CliProgress {
  SingleBar: new (o: Record<string, unknown>) => BarLike;
  MultiBar: new (o: Record<string, unknown>) => MultiBarLike;
}

function load(): CliProgress {
  return createRequire(import.meta.url)('cli-progress') as CliProgress;
}

const COMMON = {
  barCompleteChar: '#',
  barIncompleteChar: '-',
  hideCursor: true,
  clearOnComplete: true,
  fps: 5,
  // a bar never installs process-wide signal handlers: the commands own SIGINT/SIGTERM
  gracefulExit: false,
};

/**
 * One bar. `unit: 'bytes'` shows MiB and a rate; `unit: 'count'` shows done/total items (bench
 * iterations, chunks checked).
 */
export function startProgress(
  label: string,
  opts: { stream?: ProgressStream; total?: number; unit?: 'bytes' | 'count' } = {},
): Progress {
  const stream = opts.stream ?? process.stderr;
  if (!wantsProgress(stream)) return NONE;
  const { SingleBar } = load();
  const known = opts.total !== undefined && opts.total > 0;
  const bytes = (opts.unit ?? 'bytes') === 'bytes';
  const format = !bytes
    ? `${label} [{bar}] {value}/{total} eta {eta_formatted}`
    : known
      ? `${label} [{bar}] {percentage}% {doneMiB}/{totalMiB} MiB {rate} MiB/s eta {eta_formatted}`
      : `${label} {doneMiB} MiB {rate} MiB/s {duration_formatted}`;
  const bar = new SingleBar({ ...COMMON, stream, format });
  const t0 = performance.now();
  const mib = (n: number): string => (n / 1048576).toFixed(1);
  const payload = (done: number, total: number): Record<string, unknown> => ({
    doneMiB: mib(done),
    totalMiB: mib(total),
    rate: mib(done / Math.max(0.001, (performance.now() - t0) / 1000)),
  });
  let total = known ? opts.total! : 1;
  bar.start(total, 0, payload(0, total));
  return {
    update(done, newTotal) {
      if (newTotal !== undefined && newTotal > 0 && newTotal !== total) {
        total = newTotal;
        bar.setTotal(total);
      }
      bar.update(known || !bytes ? Math.min(done, total) : 0, payload(done, total));
    },
    stop: () => bar.stop(),
  };
}

/** Bars keyed by name (bytes), created on first `set`. */
export function startMultiProgress(opts: { stream?: ProgressStream } = {}): MultiProgress {
  const stream = opts.stream ?? process.stderr;
  if (!wantsProgress(stream)) return NONE_MULTI;
  const { MultiBar } = load();
  const multi = new MultiBar({
    ...COMMON,
    stream,
    format: '[{bar}] {percentage}% {done}/{whole} {status} {key}',
    barsize: 24,
  });
  const bars = new Map<string, BarLike>();
  return {
    set(key, done, total, status) {
      const t = Math.max(1, total);
      const payload = { key, status, done: formatBytes(done), whole: formatBytes(total) };
      let bar = bars.get(key);
      if (bar === undefined) {
        bar = multi.create(t, Math.min(done, t), payload);
        bars.set(key, bar);
      } else {
        bar.setTotal(t);
        bar.update(Math.min(done, t), payload);
      }
      multi.update();
    },
    stop: () => multi.stop(),
  };
}
