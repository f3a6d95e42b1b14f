import { parse as parseToml } from 'smol-toml';
import { StoreError } from '../util/errors.js';
import type { HostsConfig, MirrorConfig, RegistryHostConfig } from './hosts.js';

function isTable(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function tomlOrThrow(text: string, what: string): Record<string, unknown> {
  try {
    return parseToml(text) as Record<string, unknown>;
  } catch (err) {
    throw new StoreError('E_CONFIG', `${what}: ${(err as Error).message.split('\n')[0]}`, { file: what });
  }
}

function optBool(v: unknown, key: string): boolean | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean')
    throw new StoreError('E_CONFIG', `registries.conf: ${key} must be a boolean`, { key });
  return v;
}

/**
 * Host configs from containers-registries.conf(5) version 2 (`[[registry]]` with `prefix`,
 * `location`, `insecure`, `blocked` and `[[registry.mirror]]` with `location`, `insecure`,
 * `pull-from-mirror`), plus the v1 `[registries.insecure]`/`[registries.block]` lists. A node
 * configured for Podman then needs no second copy of its mirror settings.
 * `insecure` there means "TLS without verification, falling back to HTTP", and is kept that way.
 */
export function parseRegistriesConf(text: string): HostsConfig {
  const doc = tomlOrThrow(text, 'registries.conf');
  const hosts: HostsConfig = {};
  const regs = doc.registry;
  if (regs !== undefined) {
    if (!Array.isArray(regs))
      throw new StoreError('E_CONFIG', 'registries.conf: [[registry]] must be an array of tables');
    regs.forEach((r, i) => {
      if (!isTable(r)) throw new StoreError('E_CONFIG', `registries.conf: registry[${i}] is not a table`);
      const location = typeof r.location === 'string' ? r.location.trim() : '';
      const prefix = typeof r.prefix === 'string' && r.prefix.trim() !== '' ? r.prefix.trim() : location;
      if (prefix === '')
        throw new StoreError('E_CONFIG', `registries.conf: registry[${i}] needs a location or prefix`);
      const cfg: RegistryHostConfig = {};
      if (location !== '' && location !== prefix) cfg.location = location;
      if (optBool(r.insecure, `registry[${i}].insecure`)) cfg.tlsFallback = true;
      if (optBool(r.blocked, `registry[${i}].blocked`)) cfg.blocked = true;
      const mirrors = r.mirror;
      if (mirrors !== undefined) {
        if (!Array.isArray(mirrors))
          throw new StoreError('E_CONFIG', `registries.conf: registry[${i}].mirror must be an array`);
        cfg.mirrors = mirrors.map((m, j): MirrorConfig => {
          if (!isTable(m) || typeof m.location !== 'string' || m.location.trim() === '') {
            throw new StoreError('E_CONFIG', `registries.conf: registry[${i}].mirror[${j}] needs a location`);
          }
          const mc: MirrorConfig = { host: m.location.trim() };
          if (optBool(m.insecure, `registry[${i}].mirror[${j}].insecure`)) mc.tlsFallback = true;
          const pfm = m['pull-from-mirror'];
          if (pfm === 'all' || pfm === 'digest-only' || pfm === 'tag-only') mc.pullFromMirror = pfm;
          else if (pfm !== undefined) {
            throw new StoreError('E_CONFIG', `registries.conf: bad pull-from-mirror ${JSON.stringify(pfm)}`);
          }
          return mc;
        });
      }
      hosts[prefix] = cfg;
    });
  }
  // v1 syntax: [registries.insecure] registries = [...], [registries.block] registries = [...]
  if (isTable(doc.registries)) {
    const v1 = doc.registries;
    for (const [section, flag] of [
      ['insecure', 'tlsFallback'],
      ['block', 'blocked'],
    ] as const) {
      const list = isTable(v1[section]) ? v1[section].registries : undefined;
      if (!Array.isArray(list)) continue;
      for (const h of list) {
        if (typeof h !== 'string') continue;
        hosts[h] = { ...(hosts[h] ?? {}), [flag]: true };
      }
    }
  }
  return hosts;
}
