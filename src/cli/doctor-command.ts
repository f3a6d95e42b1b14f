import type { Command } from 'commander';
import { DEFAULT_ADDR, DEFAULT_CONFIG_PATH, DEFAULT_ROOT } from '../store/config.js';
// doctor.ts reaches registries (undici) and reads layers: loaded when the command runs.
import type { DoctorOptions } from './doctor.js';

/**
 * `stargz-store doctor [--ref REF] [--json]`: one line per check with its fix; exit 0 when nothing
 * failed (warnings and skips do not fail), 1 otherwise. JSON shape: see doctor.ts and README.md.
 */

export const DEFAULT_MOUNTPOINT = '/var/lib/stargz-store/store';

export async function runDoctor(
  o: DoctorOptions & { json?: boolean },
): Promise<{ code: number; output: string }> {
  const { formatDoctor, runDoctorChecks } = await import('./doctor.js');
  const r = await runDoctorChecks(o);
  const output = o.json === true ? `${JSON.stringify(r, null, 2)}\n` : formatDoctor(r);
  return { code: r.ok ? 0 : 1, output };
}

export function registerDoctorCommand(program: Command): void {
  program
    .command('doctor')
    .description('check the node set-up for lazy pulling (storage.conf, mount, socket, registry, layers)')
    .option('--ref <ref>', 'also check this image: credentials, registry Range support, each layer')
    .option('--mountpoint <dir>', 'the store mount point', DEFAULT_MOUNTPOINT)
    .option('--addr <sock>', 'control socket of the store', DEFAULT_ADDR)
    .option('--root <dir>', 'state root of the store', DEFAULT_ROOT)
    .option('--config <file>', `the store's config.toml (default ${DEFAULT_CONFIG_PATH})`)
    .option('--storage-conf <file>', 'storage.conf to check (default: the containers search order)')
    .option('--registries-conf <file>', 'registries.conf to check (default /etc/containers/registries.conf)')
    .option('--json', 'print JSON: {"ok":bool,"checks":[{"id","status","message","fix"}]}')
    .action(async (o: DoctorOptions & { json?: boolean }) => {
      const { code, output } = await runDoctor(o);
      process.stdout.write(output);
      process.exitCode = code;
    });
}
