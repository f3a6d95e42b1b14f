/**
 * The store's one typed configuration. The keys, checks, defaults and doc lines are declared once in
 * config/schema.ts; config/load.ts reads a file + flags against it; config/docs.ts renders
 * docs/config.md from it. This module is the import point for the rest of the code.
 */
export {
  buildConfig,
  loadConfig,
  DEFAULT_ADDR,
  DEFAULT_CONFIG_PATH,
  DEFAULT_ROOT,
  LOG_LEVELS,
  type ConfigFlags,
  type LoadedConfig,
  type LogLevel,
  type StoreConfig,
} from './config/load.js';
export { DEFAULT_REGISTRIES_CONF, type MirrorConfig, type TlsFiles } from './config/schema.js';
