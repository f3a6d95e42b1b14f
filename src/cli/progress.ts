import { createRequire } from 'node:module';

/**
 * Progress for long one-shot commands: a live line (cli-progress) on a terminal, nothing otherwise
 * (pipes, CI logs and scripts get only the command's result). cli-progress is loaded only on a TTY.
 */
export interface Progress {
  /** Bytes done so far (and the total, when it becomes known). */
  update(done: number, total?: number): void;
  stop(): void;
}

const NONE: Progress = { update: () => undefined, stop: () => undefined };

interface BarLike {
  start(total: number, value: number, payload?: Record<string, unknown>): void;
  update(value: number, payload?: Record<string, unknown>): void;
  setTotal(total: number): void;
  stop(): void;
}

export function startProgress(
  label: string,
  opts: { stream?: NodeJS.WriteStream; total?: number } = {},
): Progress {
  const stream = opts.stream ?? process.stderr;
  if (stream.isTTY !== true) return NONE;
  const { SingleBar } = createRequire(import.meta.url)('cli-progress') as {
    SingleBar: new (o: Record<string, unknown>) => BarLike;
  };
  const known = opts.total !== undefined && opts.total > 0;
  const bar = new SingleBar({
    stream,
    format: known
      ? `${label} [{bar}] {percentage}% {doneMiB}/{totalMiB} MiB {rate} MiB/s eta {eta_formatted}`
      : `${label} {doneMiB} MiB {rate} MiB/s {duration_formatted}`,
    barCompleteChar: '#',
    barIncompleteChar: '-',
    hideCursor: true,
    clearOnComplete: true,
    fps: 5,
  });
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
      bar.update(known ? Math.min(done, total) : 0, payload(done, total));
    },
    stop: () => bar.stop(),
  };
}
