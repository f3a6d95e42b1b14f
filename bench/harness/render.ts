/**
 * Re-render results.md, chart.svg (and the summaries in results.json) of a finished or interrupted run
 * with the current report code: `node dist/bench/harness/render.js <results.json> [out dir]` (the out
 * dir defaults to the file's directory).
 */
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { WorkloadName } from './workloads.js';
import type { Shaper } from './networks.js';
import { writeOutputs, type Results } from './results.js';

async function main(): Promise<void> {
  const [file, outDir] = process.argv.slice(2);
  if (!file) throw new Error('usage: render.js <results.json> [out dir]');
  const res = JSON.parse(await readFile(file, 'utf8')) as Results;
  const o = res.options as {
    quick?: boolean;
    iterations?: number;
    images?: WorkloadName[];
    scale?: number;
    shaper?: Shaper;
  };
  const out = resolve(outDir ?? dirname(file));
  await writeOutputs(
    {
      out,
      quick: o.quick ?? false,
      iterations: o.iterations ?? 0,
      images: o.images ?? [],
      scale: o.scale ?? 1,
      shaper: o.shaper ?? 'proxy',
    },
    res,
  );
  process.stdout.write(`${out}/results.md\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`render: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
});
