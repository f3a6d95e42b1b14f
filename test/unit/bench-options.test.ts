import { parse as parseToml } from 'smol-toml';
import { describe, expect, it } from 'vitest';
import { allModes, selectModes } from '../../bench/harness/modes.js';
import { parseNetwork } from '../../bench/harness/networks.js';
import { parseOptions, PRESETS } from '../../bench/harness/options.js';
import { htbCommands } from '../../bench/lib/netns.js';
import { containersConf, registriesConf, storageConf } from '../../bench/lib/podman.js';
import { isolatedCacheArgv } from '../../bench/lib/push.js';
import { registryConfig } from '../../bench/lib/registry-server.js';
import { isStoreError } from '../../src/util/errors.js';

describe('bench options', () => {
  it('--quick selects the smoke preset, explicit flags win', () => {
    const q = parseOptions(['--quick']);
    expect(q.images).toEqual(PRESETS.quick.images.split(','));
    expect(q.iterations).toBe(1);
    expect(q.scale).toBe(PRESETS.quick.scale);
    expect(q.networks.map((n) => n.name)).toEqual(PRESETS.quick.networks.split(','));
    const o = parseOptions(['--quick', '--iterations', '3', '--images', 'python', '--networks', 'loopback']);
    expect(o.iterations).toBe(3);
    expect(o.images).toEqual(['python']);
    expect(o.networks).toEqual([{ name: 'loopback', rttMs: 0 }]);
  });

  it("samples the store's memory composition only when asked (it takes CPU from the timed run)", () => {
    expect(parseOptions(['--quick']).rssParts).toBe(false);
    expect(parseOptions(['--quick', '--rss-parts']).rssParts).toBe(true);
  });

  it('defaults to the full preset with the three networks of the issue', () => {
    const f = parseOptions([]);
    expect(f.images).toEqual(['small', 'python', 'large']);
    expect(f.scale).toBe(1);
    expect(f.networks.map((n) => [n.rateMbit, n.rttMs])).toEqual([
      [undefined, 0],
      [1000, 10],
      [100, 30],
    ]);
    expect(f.shaper).toBe('proxy');
    expect(f.workDir).toBe('/tmp/sgz-bench');
  });

  it('rejects bad values with typed errors', () => {
    const bad = (argv: string[]) => {
      try {
        parseOptions(argv);
      } catch (e) {
        return isStoreError(e, 'E_CONFIG') || (e as { code?: string }).code?.startsWith('commander.');
      }
      return false;
    };
    expect(bad(['--images', 'huge'])).toBe(true);
    expect(bad(['--iterations', '0'])).toBe(true);
    expect(bad(['--iterations', '1.5'])).toBe(true);
    expect(bad(['--networks', 'fast'])).toBe(true);
    expect(bad(['--shaper', 'netem'])).toBe(true);
    expect(() => parseOptions(['--work-dir', '/repo/x/data'], '/repo/x')).toThrow(/inside the repository/);
  });

  it('parses custom network profiles', () => {
    expect(parseNetwork('50mbit-80ms')).toEqual({ name: '50mbit-80ms', rateMbit: 50, rttMs: 80 });
    expect(parseNetwork('2.5gbit-1ms')).toEqual({ name: '2.5gbit-1ms', rateMbit: 2500, rttMs: 1 });
  });

  it('offers baseline modes only with a baseline store and validates mode ids', () => {
    expect(allModes(false).map((m) => m.id)).toEqual([
      'full-gzip',
      'partial-zstd-chunked',
      'lazy-estargz',
      'lazy-esgz-opt',
      'lazy-zstd-chunked',
    ]);
    expect(
      allModes(true)
        .filter((m) => m.store === 'baseline')
        .map((m) => m.format),
    ).toEqual(['estargz', 'esgz-opt', 'zstd-chunked']);
    expect(selectModes('full-gzip,lazy-estargz', false).map((m) => m.id)).toEqual([
      'full-gzip',
      'lazy-estargz',
    ]);
    expect(() => selectModes('baseline-estargz', false)).toThrow(/unknown mode/);
  });
});

describe('generated configs', () => {
  it('storage.conf puts graphroot in the file and the ALS with :ref (parsed by an independent TOML parser)', () => {
    const als = parseToml(storageConf('/w/p', { kind: 'als', mount: '/w/m' })) as {
      storage: { driver: string; graphroot: string; runroot: string; options: Record<string, unknown> };
    };
    expect(als.storage.driver).toBe('overlay');
    expect(als.storage.graphroot).toBe('/w/p/graph');
    expect(als.storage.runroot).toBe('/w/p/run');
    expect(als.storage.options.additionallayerstores).toEqual(['/w/m:ref']);
    expect(als.storage.options.pull_options).toBeUndefined();
    const partial = parseToml(storageConf('/w/p', { kind: 'partial' })) as {
      storage: { options: Record<string, unknown> };
    };
    expect(partial.storage.options.pull_options).toMatchObject({ enable_partial_images: 'true' });
    expect(partial.storage.options.additionallayerstores).toBeUndefined();
  });

  it('containers.conf uses runc, cgroupfs and lowered ulimits; registries.conf marks hosts insecure', () => {
    const c = parseToml(containersConf('/w/p')) as {
      containers: { default_ulimits: string[]; netns: string };
      engine: { runtime: string; cgroup_manager: string; tmp_dir: string };
    };
    expect(c.engine.runtime).toBe('runc');
    expect(c.engine.cgroup_manager).toBe('cgroupfs');
    expect(c.engine.tmp_dir.startsWith('/w/p/')).toBe(true);
    expect(c.containers.default_ulimits).toEqual(['nofile=20000:20000', 'nproc=32768:32768']);
    const r = parseToml(registriesConf(['127.0.0.1:5000', '127.0.0.1:6000'])) as {
      registry: Array<{ location: string; insecure: boolean }>;
    };
    expect(r.registry).toEqual([
      { location: '127.0.0.1:5000', insecure: true },
      { location: '127.0.0.1:6000', insecure: true },
    ]);
  });

  it('registry config listens only where told', () => {
    const y = registryConfig('/data', '127.0.0.1:4567');
    expect(y).toMatch(/^ {2}addr: 127\.0\.0\.1:4567$/m);
    expect(y).toMatch(/rootdirectory: \/data$/m);
    expect(y).toMatch(/accesslog:\n\s+disabled: false/);
  });

  it('pushes run with a private, empty blob-info-cache', () => {
    const argv = isolatedCacheArgv(['podman', 'push', 'x']);
    expect(argv.slice(0, 4)).toEqual(['unshare', '-m', '--propagation', 'private']);
    expect(argv.join(' ')).toContain('mount -t tmpfs sgz-bench-bic /var/lib/containers/cache');
    expect(argv.slice(-3)).toEqual(['podman', 'push', 'x']);
  });

  it('HTB shapes to the requested rate with an explicit quantum', () => {
    const cmds = htbCommands('veth0', 100).map((c) => c.join(' '));
    expect(cmds[0]).toBe('tc qdisc add dev veth0 root handle 1: htb default 10');
    expect(cmds[1]).toContain('htb rate 100mbit ceil 100mbit quantum 60000');
  });
});
