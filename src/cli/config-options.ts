import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { ChunkCacheOptions } from '../cache/index.js';
import type { SchedulerOptions } from '../layer/index.js';
import { defaultAuthFilePaths } from '../registry/auth-files.js';
import type {
  HostsConfig,
  MirrorConfig as RegistryMirror,
  RegistryClientOptions,
} from '../registry/index.js';
import { parseRegistriesConf } from '../registry/registries-conf.js';
import type { StoreConfig, TlsFiles } from '../store/config.js';
import type { CreateLayerStoreOptions } from '../store/index.js';
import { StoreError, asStoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { rootLayout } from '../util/root-layout.js';

/**
 * Where StoreConfig (seconds, Go names) becomes each layer's own options (milliseconds, our names):
 * the registry client, the chunk cache and the layer store. The only place the config is mapped.
 * Light imports only (types, small parsers): serve-command.ts loads the heavy modules lazily.
 */

/** `[blob]`, `[resolver]`, `[platform]`, `[registry]` -> the registry client. */
export function registryClientOptions(
  config: StoreConfig,
  hosts: HostsConfig,
  credentials: RegistryClientOptions['credentials'],
  logger: Logger,
): RegistryClientOptions {
  return {
    hosts,
    credentials,
    platforms: config.platform.platforms,
    retry: {
      maxRetries: config.blob.maxRetries,
      minWaitMs: config.blob.minWaitMsec,
      maxWaitMs: config.blob.maxWaitMsec,
    },
    forceSingleRange: config.blob.forceSingleRangeMode,
    requestTimeoutMs: config.resolver.requestTimeoutSec * 1000,
    fetchTimeoutMs: config.blob.fetchingTimeoutSec * 1000,
    tagTtlMs: config.registry.tagTtlSec * 1000,
    logger,
  };
}

/** `[cache]` -> the chunk cache under `<root>/cache`. */
export function chunkCacheOptions(config: StoreConfig, logger: Logger): ChunkCacheOptions {
  return {
    root: config.root,
    // 0 = no byte bound (min_free_bytes still applies)
    maxBytes: config.cache.maxBytes === 0 ? Number.MAX_SAFE_INTEGER : config.cache.maxBytes,
    minFreeBytes: config.cache.minFreeBytes,
    memoryBytes: config.cache.memoryBytes,
    logger,
  };
}

/** `[deadlines]`, TTLs and the prefetch/background keys -> the layer store (the rest is wiring). */
export function layerStoreOptions(
  config: StoreConfig,
): Required<Pick<CreateLayerStoreOptions, 'root' | 'deadlines' | 'negativeTtlMs' | 'idleTtlMs' | 'layer'>> {
  return {
    root: config.root,
    deadlines: {
      lookupMs: config.deadlines.lookupSec * 1000,
      readMs: config.deadlines.readSec * 1000,
      fuseMs: config.deadlines.fuseSec * 1000,
    },
    negativeTtlMs: config.deadlines.negativeTtlSec * 1000,
    idleTtlMs: config.resolveResultEntryTtlSec * 1000,
    // the layer's read deadline is deadlines.readMs (createLayerStore passes it on)
    layer: {
      prefetch: !config.noprefetch,
      prefetchBytes: config.prefetchSize,
      backgroundFetch: !config.noBackgroundFetch,
      stateDir: rootLayout(config.root).layerState,
    },
  };
}

/** `[background]` and `max_concurrency` -> the store-wide fetch scheduler. */
export function schedulerOptions(config: StoreConfig): SchedulerOptions {
  return {
    backgroundConcurrency: config.background.concurrency || config.maxConcurrency,
    quietMs: config.background.quietMs,
    bandwidthBytesPerSec: config.background.bandwidthBytesPerSec,
  };
}

/** registries.conf hosts (mirrors, insecure, blocked); a missing file means none. */
export async function readRegistriesConf(path: string, logger: Logger): Promise<HostsConfig> {
  if (path === '') return {};
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new StoreError(
      'E_CONFIG',
      `config key [registry] registries_conf: cannot read ${path}: ${(err as Error).message}`,
      {
        key: 'registries_conf',
        path,
      },
    );
  }
  try {
    const hosts = parseRegistriesConf(text);
    logger.debug({ path, hosts: Object.keys(hosts) }, 'read registries.conf');
    return hosts;
  } catch (err) {
    throw new StoreError(
      'E_CONFIG',
      `config key [registry] registries_conf: ${path}: ${asStoreError(err).message}`,
      {
        key: 'registries_conf',
        path,
      },
    );
  }
}

/** The `[resolver]` hosts (Go mirrors, plus our TLS files) in the registry client's terms. */
export function hostsFromStoreConfig(config: StoreConfig): HostsConfig {
  const hosts: HostsConfig = {};
  for (const [host, { mirrors, tls }] of Object.entries(config.resolver.hosts)) {
    hosts[host] = {
      mirrors: mirrors.map((m) => {
        const mc: RegistryMirror = { host: m.host, insecure: m.insecure };
        // Go: 0 = the global [resolver] timeout, < 0 = none.
        if (m.requestTimeoutSec !== 0)
          mc.requestTimeoutMs = m.requestTimeoutSec < 0 ? Infinity : m.requestTimeoutSec * 1000;
        if (Object.keys(m.header).length > 0) mc.headers = m.header;
        if (m.rangedReads) mc.rangedReads = m.rangedReads;
        if (m.nsQuery === false) mc.nsQuery = false;
        if (m.tls) Object.assign(mc, tlsOptions(m.tls));
        return mc;
      }),
      ...(tls ? tlsOptions(tls) : {}),
    };
  }
  return hosts;
}

function tlsOptions(t: TlsFiles): Pick<RegistryMirror, 'caFiles' | 'certFile' | 'keyFile'> {
  const o: Pick<RegistryMirror, 'caFiles' | 'certFile' | 'keyFile'> = {};
  if (t.caFiles) o.caFiles = t.caFiles;
  if (t.certFile) o.certFile = t.certFile;
  if (t.keyFile) o.keyFile = t.keyFile;
  return o;
}

/** auth.json search order with the config's overrides ([registry] auth_file, docker_config). */
export function authFilePaths(config: StoreConfig, env: NodeJS.ProcessEnv = process.env): string[] {
  const e = { ...env };
  if (config.registry.authFile !== '') e.REGISTRY_AUTH_FILE = config.registry.authFile;
  const paths = defaultAuthFilePaths(e);
  if (config.registry.dockerConfig === '') return paths;
  const defaultDocker = join(e.DOCKER_CONFIG || join(e.HOME || homedir(), '.docker'), 'config.json');
  return paths.map((p) => (p === defaultDocker ? config.registry.dockerConfig : p));
}
