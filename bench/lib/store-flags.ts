import { StoreError } from '../../src/util/errors.js';
import { run } from './proc.js';

/**
 * Which of the stargz-store launch flags a store binary accepts. Ours takes
 * `--config --log-level --root --addr`; the Go stargz-store v0.12 has no control socket and exits with
 * `flag provided but not defined: -addr` when given one. The harness probes `--help` (and the `serve`
 * sub-command's help when the top level lists commands) so every baseline gets a command line it
 * accepts, or the flavour is named explicitly.
 */

export const LAUNCH_FLAGS = ['config', 'log-level', 'root', 'addr'] as const;
export type LaunchFlag = (typeof LAUNCH_FLAGS)[number];

export type StoreFlavour = 'auto' | 'go' | 'ours';

/** Flags of each known flavour (explicit `--baseline-flavour`). */
export const FLAVOUR_FLAGS: Record<Exclude<StoreFlavour, 'auto'>, readonly LaunchFlag[]> = {
  go: ['config', 'log-level', 'root'],
  ours: ['config', 'log-level', 'root', 'addr'],
};

/**
 * Option names listed in a help text (pure). Understands Go's flag package (`  -root string`) and
 * commander/GNU style (`  --root <dir>`, `-h, --help`): an option is a `-`/`--` word at the start of
 * a line (after indentation) or after `, `.
 */
export function parseHelpFlags(help: string): Set<string> {
  const out = new Set<string>();
  for (const line of help.split('\n')) {
    const re = /(?:^\s+|,\s*)--?([a-zA-Z][\w-]*)/g;
    for (let m = re.exec(line); m; m = re.exec(line)) out.add(m[1]!);
  }
  return out;
}

/** True when a help text lists a `serve` sub-command (ours: flags live on `serve`). Pure. */
export function listsServeCommand(help: string): boolean {
  return /^\s+serve\b/m.test(help);
}

/** The launch flags a store accepts, from its help texts (pure). Empty help = unknown (undefined). */
export function launchFlagsFromHelp(helps: readonly string[]): LaunchFlag[] | undefined {
  const seen = new Set<string>();
  for (const h of helps) for (const f of parseHelpFlags(h)) seen.add(f);
  const flags = LAUNCH_FLAGS.filter((f) => seen.has(f));
  return flags.length > 0 ? flags : undefined;
}

/** The flavour a flag set looks like, for messages (pure). */
export function describeFlags(flags: readonly LaunchFlag[]): string {
  return flags.includes('addr') ? 'stargz-store-ts style (with --addr)' : 'Go stargz-store style (no --addr)';
}

/**
 * Decide the launch flags of a store command: an explicit flavour wins; `auto` probes `--help`
 * (stdout + stderr; Go's flag package prints usage to stderr and exits 2) and, when the help lists a
 * `serve` command, `serve --help`. A store whose help names none of the flags is an error (it would
 * not take the stargz-store command line at all).
 */
export async function resolveLaunchFlags(
  argv: readonly string[],
  flavour: StoreFlavour,
  prefix: readonly string[] = [],
): Promise<LaunchFlag[]> {
  if (flavour !== 'auto') return [...FLAVOUR_FLAGS[flavour]];
  const help = async (args: string[]) => {
    const cmd = [...prefix, ...argv, ...args];
    const r = await run(cmd[0]!, cmd.slice(1), { allowFail: true, timeoutMs: 30_000 });
    return r.stdout + '\n' + r.stderr;
  };
  const top = await help(['--help']);
  const helps = [top];
  if (listsServeCommand(top)) helps.push(await help(['serve', '--help']));
  const flags = launchFlagsFromHelp(helps);
  if (!flags) {
    throw new StoreError(
      'E_CONFIG',
      `${argv.join(' ')} --help lists none of --${LAUNCH_FLAGS.join(', --')}: not a stargz-store? (name the flavour with --baseline-flavour go|ours)`,
    );
  }
  return flags;
}
