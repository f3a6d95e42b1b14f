import { describe, expect, it } from 'vitest';
import { parseOptions } from '../../bench/harness/options.js';
import {
  describeFlags,
  FLAVOUR_FLAGS,
  launchFlagsFromHelp,
  listsServeCommand,
  parseHelpFlags,
  resolveLaunchFlags,
} from '../../bench/lib/store-flags.js';
import { parseResolutions } from '../../bench/lib/store-log.js';
import { storeArgv } from '../../bench/lib/store-process.js';
import { isStoreError } from '../../src/util/errors.js';

// `stargz-store --help` of the Go v0.12.0 build (Go's flag package, printed on stderr, exit 2)
const GO_HELP = `Usage of /tmp/lab/go/stargz-store:
  -config string
    \tpath to the configuration file (default "/etc/stargz-store/config.toml")
  -log-level string
    \tset the logging level [trace, debug, info, warn, error, fatal, panic] (default "info")
  -root string
    \tpath to the root directory for this snapshotter (default "/var/lib/stargz-store")
`;

// ours: commander top level (commands, no serve flags) and `serve --help`
const OURS_TOP = `Usage: stargz-store [options] [command]

Options:
  -h, --help                    display help for command

Commands:
  serve [options] [mountpoint]  mount the Additional Layer Store at <mountpoint>
                                and serve until SIGINT/SIGTERM (default command)
  layer                         inspect, read and build eStargz / zstd:chunked
`;
const OURS_SERVE = `Usage: stargz-store serve [options] [mountpoint]

Options:
  --config <file>           TOML config (a missing file is fatal unless it is
                            /etc/stargz-store/config.toml)
  --log-level <level>       trace, debug, info, warn, error, fatal (default:
                            "info")
  --root <dir>              state root (cache, metadata) (default:
                            "/var/lib/stargz-store")
  --addr <sock>             control socket for stargz-store-helper and status
                            (default: "/var/lib/stargz-store/store.sock")
  --set <key=value>         override a config.toml key, e.g.
                            blob.chunk_size=100000 (repeatable) (default: [])
  -h, --help                display help for command
`;

const base = {
  command: ['/opt/go/stargz-store'],
  root: '/w/root',
  mountpoint: '/w/m',
  addr: '/w/store.sock',
  config: '/w/config.toml',
  logLevel: 'info',
};

describe('baseline store command line', () => {
  it('reads option names from Go flag and commander help texts, not from descriptions', () => {
    expect([...parseHelpFlags(GO_HELP)].sort()).toEqual(['config', 'log-level', 'root']);
    expect(parseHelpFlags(OURS_SERVE)).toEqual(
      new Set(['config', 'log-level', 'root', 'addr', 'set', 'h', 'help']),
    );
    // "/etc/stargz-store/..." and "blob.chunk_size=..." continuation lines name no option
    expect(parseHelpFlags('    /etc/x --not-at-line-start\n  (default: "-x")')).toEqual(new Set());
  });

  it('finds the launch flags of each flavour, looking at serve --help only when listed', () => {
    expect(launchFlagsFromHelp([GO_HELP])).toEqual(['config', 'log-level', 'root']);
    expect(listsServeCommand(GO_HELP)).toBe(false);
    expect(listsServeCommand(OURS_TOP)).toBe(true);
    expect(launchFlagsFromHelp([OURS_TOP])).toBeUndefined(); // only -h/--help at top level
    expect(launchFlagsFromHelp([OURS_TOP, OURS_SERVE])).toEqual(['config', 'log-level', 'root', 'addr']);
    expect(launchFlagsFromHelp(['sh: 1: nope: not found'])).toBeUndefined();
    expect(describeFlags(FLAVOUR_FLAGS.go)).toContain('no --addr');
    expect(describeFlags(FLAVOUR_FLAGS.ours)).toContain('with --addr');
  });

  it('leaves out the flags a store does not take (the Go store rejects --addr)', () => {
    const go = storeArgv({ ...base, flags: FLAVOUR_FLAGS.go });
    expect(go).toEqual([
      '/opt/go/stargz-store',
      '--config',
      '/w/config.toml',
      '--log-level',
      'info',
      '--root',
      '/w/root',
      '/w/m',
    ]);
    expect(go).not.toContain('--addr');
    const ours = storeArgv({ ...base, flags: FLAVOUR_FLAGS.ours, prefix: ['nsenter', '--net=/x'] });
    expect(ours.slice(0, 3)).toEqual(['nsenter', '--net=/x', '/opt/go/stargz-store']);
    expect(ours.slice(-3)).toEqual(['--addr', '/w/store.sock', '/w/m']);
    // no flag list = every flag (the harness's own store); extra args go before the mount point
    const all = storeArgv({ ...base, extraArgs: ['--x', 'y'] });
    expect(all).toContain('--addr');
    expect(all.slice(-3)).toEqual(['--x', 'y', '/w/m']);
  });

  it('probes a real binary: a help text without store flags is a typed error', async () => {
    // /bin/echo prints its arguments: "--help" names none of the launch flags
    await expect(resolveLaunchFlags(['/bin/echo'], 'auto')).rejects.toSatisfy(
      (e: unknown) => isStoreError(e) && e.code === 'E_CONFIG' && /--baseline-flavour/.test(e.message),
    );
    // an explicit flavour needs no probe
    expect(await resolveLaunchFlags(['/nonexistent'], 'go')).toEqual(['config', 'log-level', 'root']);
  });

  it('parses the baseline options and the workload list', () => {
    const o = parseOptions([
      '--images',
      'large',
      '--baseline-store',
      '/opt/go/stargz-store',
      '--baseline-flavour',
      'go',
      '--baseline-args',
      ' --a  b ',
      '--baseline-config',
      '/c.toml',
      '--workload',
      'startup,model-load',
    ]);
    expect(o.baselineFlavour).toBe('go');
    expect(o.baselineArgs).toEqual(['--a', 'b']);
    expect(o.baselineConfig).toBe('/c.toml');
    expect(o.workloads).toEqual(['startup', 'model-load']);
    const d = parseOptions([]);
    expect(d.baselineFlavour).toBe('auto');
    expect(d.baselineArgs).toEqual([]);
    expect(d.workloads).toEqual(['startup']);
    const bad = (argv: string[]) => {
      try {
        parseOptions(argv);
      } catch (e) {
        return isStoreError(e) ? e.message : String(e);
      }
      return 'no error';
    };
    expect(bad(['--workload', 'train'])).toContain('unknown workload "train"');
    expect(bad(['--images', 'small', '--workload', 'model-load'])).toContain('needs the large image');
  });
});

describe('store log', () => {
  it('takes the first `layer resolved` ms per digest from JSON lines and ignores the rest', () => {
    const log = [
      '{"level":30,"msg":"mounted"}',
      '{"level":30,"digest":"sha256:aa","ms":412,"msg":"layer resolved: served lazily"}',
      'not json but mentions layer resolved',
      '{"level":30,"digest":"sha256:bb","ms":"77","msg":"layer resolved: served lazily"}',
      '{"level":30,"digest":"sha256:aa","ms":5,"msg":"layer resolved: served lazily"}',
      '{"level":40,"digest":"sha256:cc","ms":9,"msg":"layer with a saved record cannot be opened now"}',
      '{"level":30,"digest":"sha256:dd","msg":"layer resolved: served lazily"}',
    ].join('\n');
    expect(parseResolutions(log)).toEqual([
      { digest: 'sha256:aa', ms: 412 },
      { digest: 'sha256:bb', ms: 77 },
    ]);
    expect(parseResolutions('')).toEqual([]);
  });
});
