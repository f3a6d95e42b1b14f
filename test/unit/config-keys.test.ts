import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildConfig,
  DEFAULT_CONFIG_PATH,
  loadConfig,
  type StoreConfig,
} from '../../src/store/config/load.js';
import { isStoreError, StoreError } from '../../src/util/errors.js';

const MNT = { mountpoint: '/var/lib/stargz-store/store' };

function configError(text: string, flags = {}): StoreError {
  try {
    buildConfig(text, { ...MNT, ...flags }, '/tmp/test.toml');
  } catch (err) {
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
    return err as StoreError;
  }
  throw new Error(`expected E_CONFIG for:\n${text}`);
}

describe('config defaults (stargz-format.md §6.1 and §3.1)', () => {
  const { config: c, warnings, notes } = buildConfig(undefined, MNT);

  it('uses the Go store flag defaults', () => {
    expect(c.root).toBe('/var/lib/stargz-store');
    expect(c.addr).toBe('/var/lib/stargz-store/store.sock');
    expect(c.logLevel).toBe('info');
    expect(c.mountpoint).toBe('/var/lib/stargz-store/store');
    expect(warnings).toEqual([]);
    expect(notes).toEqual([]);
  });

  it('has every Go top-level key with its documented default', () => {
    const expected: Partial<StoreConfig> = {
      httpCacheType: 'disk',
      filesystemCacheType: 'disk',
      resolveResultEntryTtlSec: 120,
      prefetchSize: 0,
      prefetchTimeoutSec: 10,
      prefetchAsyncSize: 0,
      noprefetch: false,
      noBackgroundFetch: false,
      debug: false,
      allowNoVerification: false,
      maxConcurrency: 2,
      noPrometheus: false,
      logFileAccess: false,
      metadataStore: 'memory',
    };
    expect(c).toMatchObject(expected);
  });

  it('has every Go [blob], [directory_cache], [fuse], [kubeconfig_keychain], [resolver] default', () => {
    expect(c.blob).toEqual({
      validIntervalSec: 60,
      checkAlways: false,
      chunkSize: 50000,
      fetchingTimeoutSec: 300,
      forceSingleRangeMode: false,
      prefetchChunkSize: 0,
      maxRetries: 5,
      minWaitMsec: 30,
      maxWaitMsec: 300000,
    });
    expect(c.directoryCache).toEqual({
      maxLruCacheEntry: 10,
      maxCacheFds: 10,
      syncAdd: false,
      direct: true,
      fadvDontneed: false,
    });
    expect(c.fuse).toMatchObject({ passthrough: false, mergeBufferSize: 419430400, mergeWorkerCount: 10 });
    expect(c.kubeconfigKeychain).toEqual({ enableKeychain: false, kubeconfigPath: '' });
    expect(c.resolver).toEqual({ requestTimeoutSec: 30, hosts: {} });
  });

  it('defaults [platform] platforms to the host platform, not to amd64', () => {
    const arch = Object.getOwnPropertyDescriptor(process, 'arch')!;
    Object.defineProperty(process, 'arch', { ...arch, value: 'arm64' });
    try {
      expect(buildConfig(undefined, { mountpoint: '/mnt' }).config.platform.platforms).toEqual([
        'linux/arm64',
      ]);
    } finally {
      Object.defineProperty(process, 'arch', arch);
    }
  });

  it('has our own groups', () => {
    // the host platform, computed independently of the registry code
    const arch = { x64: 'amd64', arm64: 'arm64', ia32: '386' }[process.arch as string] ?? process.arch;
    expect(c.platform.platforms).toEqual([`${process.platform}/${arch}`]);
    expect(c.registry).toEqual({
      authFile: '',
      dockerConfig: '',
      registriesConf: '/etc/containers/registries.conf',
      tagTtlSec: 60,
    });
    expect(c.deadlines.fuseSec).toBeGreaterThan(Math.max(c.deadlines.lookupSec, c.deadlines.readSec));
    expect(c.deadlines.negativeTtlSec).toBe(60);
    expect(c.cache.maxBytes).toBeGreaterThan(0);
  });
});

describe('config file', () => {
  it('accepts every Go key of §6.1 with no unknown-key warning; no-effect keys become notes', () => {
    const text = `
http_cache_type = "memory"
filesystem_cache_type = "memory"
resolve_result_entry_ttl_sec = 30
prefetch_size = 1000
prefetch_timeout_sec = 5
prefetch_async_size = 7
noprefetch = true
no_background_fetch = true
debug = true
allow_no_verification = true
disable_verification = false
max_concurrency = 4
no_prometheus = true
log_file_access = true
metadata_store = "db"
resolve_result_entry = 3
[blob]
valid_interval = 1
check_always = true
chunk_size = 100000
fetching_timeout_sec = 60
force_single_range_mode = true
prefetch_chunk_size = 5
max_retries = 2
min_wait_msec = 10
max_wait_msec = 1000
[directory_cache]
max_lru_cache_entry = 3
max_cache_fds = 4
sync_add = true
direct = false
fadv_dontneed = true
[fuse]
attr_timeout = 2
entry_timeout = 2
passthrough = true
merge_buffer_size = 10
merge_worker_count = 2
[kubeconfig_keychain]
enable_keychain = false
kubeconfig_path = "/root/.kube/config"
[resolver]
request_timeout_sec = 10
[[resolver.host."docker.io".mirrors]]
host = "mirror-a.example.com:5000"
insecure = true
request_timeout_sec = -1
header = { "x-one" = "1", "x-many" = ["a", "b"] }
[[resolver.host."docker.io".mirrors]]
host = "mirror-b.example.com"
`;
    const { config: c, warnings, notes } = buildConfig(text, MNT, '/tmp/x.toml');
    expect(warnings).toEqual([]);
    expect(c.configFile).toBe('/tmp/x.toml');
    expect(c).toMatchObject({
      httpCacheType: 'memory',
      resolveResultEntryTtlSec: 30,
      prefetchSize: 1000,
      noprefetch: true,
      noBackgroundFetch: true,
      debug: true,
      maxConcurrency: 4,
      metadataStore: 'db',
    });
    expect(c.blob).toMatchObject({ chunkSize: 100000, fetchingTimeoutSec: 60, forceSingleRangeMode: true });
    expect(c.blob).toMatchObject({ maxRetries: 2, minWaitMsec: 10, maxWaitMsec: 1000 });
    expect(c.resolver.requestTimeoutSec).toBe(10);
    expect(c.resolver.hosts['docker.io']!.mirrors).toEqual([
      {
        host: 'mirror-a.example.com:5000',
        insecure: true,
        requestTimeoutSec: -1,
        header: { 'x-one': ['1'], 'x-many': ['a', 'b'] },
      },
      { host: 'mirror-b.example.com', insecure: false, requestTimeoutSec: 0, header: {} },
    ]);
    for (const k of [
      'http_cache_type',
      'prefetch_timeout_sec',
      'allow_no_verification',
      'no_prometheus',
      'metadata_store',
      '[blob] valid_interval',
      '[blob] prefetch_chunk_size',
      '[directory_cache] direct',
      '[fuse] attr_timeout',
      '[fuse] passthrough',
      'resolve_result_entry',
    ]) {
      expect(notes.some((n) => n.startsWith(`config key ${k} `))).toBe(true);
    }
    // Keys that do something here are not reported as no-effect.
    for (const k of [
      'noprefetch',
      '[blob] chunk_size',
      '[resolver] request_timeout_sec',
      'max_concurrency',
    ]) {
      expect(notes.some((n) => n.startsWith(`config key ${k} `))).toBe(false);
    }
  });

  it('zero means the default for Go numeric keys', () => {
    const { config: c } = buildConfig(
      'resolve_result_entry_ttl_sec = 0\nmax_concurrency = 0\n[blob]\nchunk_size = 0\nmax_retries = 0\n[resolver]\nrequest_timeout_sec = 0\n',
      MNT,
    );
    expect(c.resolveResultEntryTtlSec).toBe(120);
    expect(c.maxConcurrency).toBe(2);
    expect(c.blob.chunkSize).toBe(50000);
    expect(c.blob.maxRetries).toBe(5);
    expect(c.resolver.requestTimeoutSec).toBe(30);
  });

  it('warns once per unknown key, naming it, and keeps going', () => {
    const { config: c, warnings } = buildConfig(
      'metrics_port = 8234\nchunk_size = 5\n[blob]\nchunk_size = 7\nchunksize = 9\n[cache]\nmax_byte = 1\n[nosuch]\nx = 1\n[[resolver.host."r.example".mirrors]]\nhost = "m"\nport = 1\n',
      MNT,
    );
    expect(c.blob.chunkSize).toBe(7);
    expect(warnings).toEqual(
      expect.arrayContaining([
        'unknown config key metrics_port (ignored)',
        'unknown config key chunk_size (ignored)',
        'unknown config key [blob] chunksize (ignored)',
        'unknown config key [cache] max_byte (ignored)',
        'unknown config key nosuch (ignored)',
        'unknown config key [[resolver.host."r.example".mirrors]]#1 port (ignored)',
      ]),
    );
    expect(warnings).toHaveLength(6);
  });

  it('names the key in every bad-value message', () => {
    expect(configError('[blob]\nchunk_size = -3\n').message).toBe(
      'config key [blob] chunk_size: must be a positive integer, got -3',
    );
    expect(configError('noprefetch = "yes"').message).toBe(
      'config key noprefetch: must be true or false, got "yes"',
    );
    expect(configError('prefetch_size = -1').message).toMatch(
      /^config key prefetch_size: must be a non-negative integer, got -1$/,
    );
    expect(configError('prefetch_size = 1.5').message).toMatch(/^config key prefetch_size: .* got 1.5$/);
    expect(configError('prefetch_size = 9223372036854775807').message).toMatch(
      /^config key prefetch_size: .*9223372036854775807$/,
    );
    expect(configError('metadata_store = "bolt"').message).toMatch(
      /^config key metadata_store: must be one of "memory", "db", got "bolt"$/,
    );
    expect(configError('[blob]\nmax_wait_msec = 10\nmin_wait_msec = 20\n').message).toMatch(
      /^config key \[blob\] min_wait_msec:/,
    );
    expect(configError('[deadlines]\nread_sec = 0\n').message).toMatch(
      /^config key \[deadlines\] read_sec: must be a positive number/,
    );
    expect(configError('[deadlines]\nread_sec = 40\n').message).toMatch(
      /^config key \[deadlines\] fuse_sec: must be greater than /,
    );
    // equal is not enough: the layer's own read deadline must answer before the adapter's
    expect(configError('[deadlines]\nread_sec = 30\nfuse_sec = 30\n').message).toMatch(
      /^config key \[deadlines\] fuse_sec: must be greater than /,
    );
    expect(configError('[deadlines]\nnegative_ttl_sec = 0\n').message).toMatch(
      /^config key \[deadlines\] negative_ttl_sec: /,
    );
    expect(configError('[platform]\nplatforms = ["amd64"]\n').message).toMatch(
      /^config key \[platform\] platforms: /,
    );
    expect(configError('[platform]\nplatforms = []\n').message).toMatch(
      /^config key \[platform\] platforms: /,
    );
    expect(configError('[registry]\nauth_file = "relative/auth.json"\n').message).toMatch(
      /^config key \[registry\] auth_file: /,
    );
    expect(configError('blob = 3').message).toMatch(/^config key blob: must be a table/);
    expect(configError('blob = 1979-05-27').message).toBe('config key blob: must be a table, got a date');
    expect(
      configError('[[resolver.host."docker.io".mirrors]]\nhost = "https://m.example"\n').message,
    ).toMatch(
      /^config key \[\[resolver\.host\."docker\.io"\.mirrors\]\]#1 host: must be a host\[:port\] without scheme/,
    );
    expect(
      configError('[[resolver.host."docker.io".mirrors]]\nhost = "m"\nheader = { "x-a" = 1 }\n').message,
    ).toMatch(/^config key \[\[resolver\.host\."docker\.io"\.mirrors\]\]#1 header\.x-a: /);
    expect(configError('[[resolver.host."docker.io".mirrors]]\ninsecure = true\n').message).toMatch(
      /#1 host: /,
    );
  });

  it('disable_verification = true is fatal (like Go)', () => {
    const err = configError('disable_verification = true');
    expect(err.message).toMatch(/^config key disable_verification: /);
    expect(err.context.key).toBe('disable_verification');
  });

  it('enable_keychain = true is accepted with a warning (not supported here)', () => {
    const { warnings } = buildConfig('[kubeconfig_keychain]\nenable_keychain = true\n', MNT);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^config key \[kubeconfig_keychain\] enable_keychain: /);
  });

  it('rejects invalid TOML naming the file', () => {
    const err = configError('chunk_size = = 3');
    expect(err.message).toMatch(/^config file \/tmp\/test\.toml: invalid TOML: /);
    expect(configError('__proto__ = 1').message).toMatch(/invalid TOML/);
  });
});

describe('flags', () => {
  it('flags override the file (defaults <- file <- flags)', () => {
    const file = '[blob]\nchunk_size = 1000\nmax_retries = 3\n[deadlines]\nread_sec = 5\n';
    const { config: c } = buildConfig(file, {
      ...MNT,
      root: '/tmp/r',
      addr: '/tmp/r/s.sock',
      logLevel: 'debug',
      set: ['blob.chunk_size=2000', 'http_cache_type=memory', 'platform.platforms=["linux/arm64/v8"]'],
    });
    expect(c.blob.chunkSize).toBe(2000);
    expect(c.blob.maxRetries).toBe(3); // file value kept where no flag
    expect(c.deadlines.readSec).toBe(5);
    expect(c.httpCacheType).toBe('memory');
    expect(c.platform.platforms).toEqual(['linux/arm64/v8']);
    expect(c).toMatchObject({ root: '/tmp/r', addr: '/tmp/r/s.sock', logLevel: 'debug' });
  });

  it('a flag value is validated like the file, naming the key', () => {
    expect(configError('', { set: ['blob.chunk_size=-3'] }).message).toBe(
      'config key [blob] chunk_size: must be a positive integer, got -3',
    );
    expect(configError('', { set: ['nonsense'] }).message).toMatch(/^flag --set: /);
    expect(configError('', { set: ['__proto__.x=1'] }).message).toMatch(/^flag --set: reserved key/);
    expect(configError('', { logLevel: 'loud' }).message).toMatch(/^flag --log-level: must be one of/);
    expect(configError('', { addr: '/tmp/' + 'x'.repeat(120) }).message).toMatch(
      /^flag --addr: socket path longer than 107 bytes/,
    );
    expect(configError('', { mountpoint: '' }).message).toMatch(/mount point/);
  });

  it('accepts Go log levels (panic maps to fatal) and resolves relative paths', () => {
    const { config: c } = buildConfig(undefined, { mountpoint: 'mnt', root: 'state', logLevel: 'PANIC' });
    expect(c.logLevel).toBe('fatal');
    expect(c.mountpoint).toBe(join(process.cwd(), 'mnt'));
    expect(c.root).toBe(join(process.cwd(), 'state'));
  });
});

describe('loadConfig (files on disk)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'config-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('a missing non-default config file is fatal', async () => {
    const err = await loadConfig({ ...MNT, config: join(dir, 'absent.toml') }).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
    expect((err as Error).message).toBe(`config file ${join(dir, 'absent.toml')}: not found`);
  });

  it('the default path may be absent (also when named explicitly, as the systemd unit does)', async () => {
    const present = existsSync(DEFAULT_CONFIG_PATH);
    for (const flags of [MNT, { ...MNT, config: DEFAULT_CONFIG_PATH }]) {
      const { config: c } = await loadConfig(flags);
      expect(c.configFile).toBe(present ? DEFAULT_CONFIG_PATH : undefined);
    }
  });

  it('reads a file and reports its path', async () => {
    const p = join(dir, 'c.toml');
    await writeFile(p, '[blob]\nchunk_size = 4096\n');
    const { config: c } = await loadConfig({ ...MNT, config: p });
    expect(c.blob.chunkSize).toBe(4096);
    expect(c.configFile).toBe(p);
  });

  it('a directory instead of a file is fatal with the path', async () => {
    const err = await loadConfig({ ...MNT, config: dir }).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
    expect((err as Error).message).toContain(dir);
  });

  it('the shipped example systemd/config.toml parses without warnings and equals the defaults', async () => {
    const text = await readFile(new URL('../../systemd/config.toml', import.meta.url), 'utf8');
    const fromExample = buildConfig(text, MNT, 'example');
    expect(fromExample.warnings).toEqual([]);
    const defaults = buildConfig(undefined, MNT).config;
    expect({ ...fromExample.config, configFile: undefined }).toEqual(defaults);
  });
});
