import { StoreError } from '../util/errors.js';
import { DOCKER_HUB, DOCKER_HUB_API_HOST, type ImageRef } from './reference.js';

/** Connection settings of one registry or mirror host. */
export interface EndpointOptions {
  /** Force a scheme (e.g. HTTPS to a loopback registry). */
  scheme?: 'http' | 'https';
  /** Plain HTTP (the Go store's `insecure`). Loopback hosts use HTTP unless TLS material is configured. */
  insecure?: boolean;
  /** HTTPS without certificate verification, then plain HTTP (registries.conf `insecure`). */
  tlsFallback?: boolean;
  /** Extra CA certificates (PEM text or file paths), added to the system roots. */
  ca?: string[];
  caFiles?: string[];
  /** Client certificate and key for mutual TLS (PEM text or file paths). */
  cert?: string;
  key?: string;
  certFile?: string;
  keyFile?: string;
  /** Extra request headers (never used for secrets by us; values are not logged). */
  headers?: Record<string, string | string[]>;
  /** Per-attempt timeout; undefined = client default, Infinity = none. */
  requestTimeoutMs?: number;
}

export interface MirrorConfig extends EndpointOptions {
  /** `host[:port]` optionally followed by `/namespace` that replaces the matched prefix. */
  host: string;
  /** registries.conf `pull-from-mirror`. */
  pullFromMirror?: 'all' | 'digest-only' | 'tag-only';
  /**
   * Where blob range reads go: `mirror` (default; a mirror that ignores Range streams each blob
   * once and every read waits for its bytes), `split` (the same stream, but reads far ahead of it
   * go to the next host meanwhile, so a cold cache costs no start-up time) or `next-host` (range
   * reads skip this mirror and go to the next host, usually the origin, while the mirror still
   * serves manifests and configs).
   */
  rangedReads?: RangedReads;
  /** Send `?ns=<registry>` (containerd's convention, Dragonfly's upstream selector). Default true. */
  nsQuery?: boolean;
}

export type RangedReads = 'mirror' | 'split' | 'next-host';

export interface RegistryHostConfig extends EndpointOptions {
  /** Tried in order before the registry itself. */
  mirrors?: MirrorConfig[];
  /** registries.conf `location`: where the matched prefix really lives. */
  location?: string;
  /** registries.conf `blocked`. */
  blocked?: boolean;
}

/** Keyed by registry host, `host/namespace` prefix, or `*.domain` wildcard. */
export type HostsConfig = Record<string, RegistryHostConfig>;

/** One place to send requests for a given image: a mirror or the registry itself. */
export interface Endpoint {
  /** `host[:port]` of the URL. */
  host: string;
  scheme: 'http' | 'https';
  /** Repository path at this endpoint (differs from the ref when a mirror rewrites the prefix). */
  repository: string;
  /** Upstream registry name, sent as `?ns=` to mirrors. */
  ns?: string;
  /** The registry the reference names (credentials from the helper channel only go here). */
  isUpstream: boolean;
  /** Skip certificate verification (registries.conf insecure). */
  skipVerify: boolean;
  options: EndpointOptions;
  /** `scheme://host` */
  origin: string;
  /** Mirrors only: `split` / `next-host` (see MirrorConfig.rangedReads). */
  rangedReads?: RangedReads;
}

/** containerd's MatchLocalhost: loopback registries are spoken to over plain HTTP. */
export function isLoopbackHost(host: string): boolean {
  let h = host;
  if (h.startsWith('[')) h = h.slice(1, h.indexOf(']'));
  else if (h.split(':').length === 2) h = h.split(':')[0]!;
  h = h.toLowerCase();
  return h === 'localhost' || h === '::1' || h === '0:0:0:0:0:0:0:1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

function matchKey(key: string, name: string, registry: string): number {
  // returns the matched length for prefix keys, -1 if no match
  if (key.startsWith('*.')) {
    const suffix = key.slice(1);
    const host = registry;
    return host.endsWith(suffix) && host.length > suffix.length ? 0 : -1;
  }
  if (name === key || name.startsWith(`${key}/`)) return key.length;
  return -1;
}

/** The most specific host-config entry for a reference (longest prefix; wildcards last). */
export function findHostConfig(
  hosts: HostsConfig,
  ref: Pick<ImageRef, 'registry' | 'repository'>,
): { key: string; config: RegistryHostConfig; matchedPrefix: string } | undefined {
  const name = `${ref.registry}/${ref.repository}`;
  let best: { key: string; config: RegistryHostConfig; matchedPrefix: string; score: number } | undefined;
  for (const [key, config] of Object.entries(hosts)) {
    const k = normaliseKey(key);
    const len = matchKey(k, name, ref.registry);
    if (len < 0) continue;
    // wildcard matches rank below any explicit prefix
    const score = k.startsWith('*.') ? k.length - 1000 : len;
    if (!best || score > best.score)
      best = { key, config, matchedPrefix: len === 0 ? ref.registry : k, score };
  }
  return best && { key: best.key, config: best.config, matchedPrefix: best.matchedPrefix };
}

function normaliseKey(key: string): string {
  let k = key.trim().replace(/\/+$/, '');
  k = k.replace(/^https?:\/\//, '');
  if (k === 'index.docker.io' || k === DOCKER_HUB_API_HOST) return DOCKER_HUB;
  if (k.startsWith('index.docker.io/')) k = DOCKER_HUB + k.slice('index.docker.io'.length);
  return k;
}

function splitLocation(loc: string): { host: string; path: string } {
  const l = loc.replace(/^https?:\/\//, '').replace(/\/+$/, '');
  const slash = l.indexOf('/');
  if (slash < 0) return { host: l, path: '' };
  return { host: l.slice(0, slash), path: l.slice(slash + 1) };
}

function apiHost(host: string): string {
  return host === DOCKER_HUB ? DOCKER_HUB_API_HOST : host;
}

function makeEndpoint(
  location: string,
  suffix: string,
  opts: EndpointOptions,
  isUpstream: boolean,
  ns: string | undefined,
  scheme: 'http' | 'https',
  skipVerify: boolean,
): Endpoint {
  const { host, path } = splitLocation(location);
  let repository = `${path}${suffix}`.replace(/^\/+/, '');
  const h = apiHost(host.toLowerCase());
  // Docker Hub's official images live under library/ also when reached through a rewrite.
  if (h === DOCKER_HUB_API_HOST && repository !== '' && !repository.includes('/'))
    repository = `library/${repository}`;
  if (repository === '') {
    throw new StoreError('E_CONFIG', `mirror/location "${location}" leaves an empty repository`, { host });
  }
  const ep: Endpoint = {
    host: h,
    scheme,
    repository,
    isUpstream,
    skipVerify,
    options: opts,
    origin: `${scheme}://${h}`,
  };
  if (ns !== undefined) ep.ns = ns;
  return ep;
}

function schemesFor(
  host: string,
  opts: EndpointOptions,
): Array<{ scheme: 'http' | 'https'; skipVerify: boolean }> {
  if (opts.scheme) return [{ scheme: opts.scheme, skipVerify: false }];
  if (opts.insecure) return [{ scheme: 'http', skipVerify: false }];
  // a CA or client certificate configured for a loopback host means TLS is intended
  const tlsMaterial = !!(opts.ca?.length || opts.caFiles?.length || opts.cert || opts.certFile);
  if (isLoopbackHost(host) && !tlsMaterial) return [{ scheme: 'http', skipVerify: false }];
  if (opts.tlsFallback) {
    return [
      { scheme: 'https', skipVerify: true },
      { scheme: 'http', skipVerify: false },
    ];
  }
  return [{ scheme: 'https', skipVerify: false }];
}

/**
 * Where to send requests for `ref`, in order: the configured mirrors, then the registry itself.
 * Mirrors get `?ns=<registry>` and never receive the helper-channel credentials of the registry.
 */
export function resolveEndpoints(
  ref: Pick<ImageRef, 'registry' | 'repository' | 'digest'>,
  hosts: HostsConfig,
): Endpoint[] {
  const found = findHostConfig(hosts, ref);
  const name = `${ref.registry}/${ref.repository}`;
  const cfg: RegistryHostConfig = found?.config ?? {};
  if (cfg.blocked) {
    throw new StoreError('E_CONFIG', `registry ${found?.key ?? ref.registry} is blocked by configuration`, {
      registry: ref.registry,
    });
  }
  const prefix = found?.matchedPrefix ?? ref.registry;
  const suffix = name.slice(prefix.length); // '' or '/...'
  const out: Endpoint[] = [];
  for (const m of cfg.mirrors ?? []) {
    if (m.pullFromMirror === 'digest-only' && ref.digest === undefined) continue;
    if (m.pullFromMirror === 'tag-only' && ref.digest !== undefined) continue;
    const mh = splitLocation(m.host).host;
    const mhost = apiHost(mh.toLowerCase());
    const ns = m.nsQuery === false || mhost === apiHost(ref.registry) ? undefined : ref.registry;
    for (const s of schemesFor(mh, m)) {
      const ep = makeEndpoint(m.host, suffix, m, false, ns, s.scheme, s.skipVerify);
      if (m.rangedReads !== undefined && m.rangedReads !== 'mirror') ep.rangedReads = m.rangedReads;
      out.push(ep);
    }
  }
  const upstreamLocation = cfg.location ?? prefix;
  const upstreamHost = splitLocation(upstreamLocation).host;
  for (const s of schemesFor(upstreamHost, cfg)) {
    const ep = makeEndpoint(upstreamLocation, suffix, cfg, true, undefined, s.scheme, s.skipVerify);
    // A `location` rewrite to another host is a different registry: treat it like a mirror for credentials.
    ep.isUpstream = apiHost(ep.host) === apiHost(ref.registry);
    out.push(ep);
  }
  return out;
}

/** Append `?ns=` for mirrors. */
export function endpointUrl(ep: Endpoint, path: string): string {
  const url = `${ep.origin}/v2/${ep.repository}/${path}`;
  return ep.ns === undefined ? url : `${url}?ns=${encodeURIComponent(ep.ns)}`;
}

/** Merge host configs: scalar options of `b` win, mirrors of `a` come first (deduplicated by host). */
export function mergeHostsConfigs(...configs: Array<HostsConfig | undefined>): HostsConfig {
  const out: HostsConfig = {};
  for (const c of configs) {
    if (!c) continue;
    for (const [rawKey, v] of Object.entries(c)) {
      const key = normaliseKey(rawKey);
      const prev = out[key];
      if (!prev) {
        out[key] = { ...v, mirrors: v.mirrors ? [...v.mirrors] : undefined };
        continue;
      }
      const mirrors = [...(prev.mirrors ?? [])];
      for (const m of v.mirrors ?? []) if (!mirrors.some((x) => x.host === m.host)) mirrors.push(m);
      out[key] = { ...prev, ...v, mirrors };
    }
  }
  return out;
}
