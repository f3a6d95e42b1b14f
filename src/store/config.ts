/**
 * The store's one typed configuration. The keys, checks, defaults and doc lines are declared once in
 * config/schema.ts; config/load.ts reads a file + flags against it (buildConfig: the pure core);
 * config/docs.ts renders docs/config.md from it. This module is the import point for the rest of
 * the code, and it loads no schema code: the daemon validates in a child process
 * (loadConfigIsolated), and the types below are erased. Short-lived commands that check a config
 * in process (doctor) and the tests import config/load.ts itself.
 */
export {
  DEFAULT_ADDR,
  DEFAULT_CONFIG_PATH,
  DEFAULT_REGISTRIES_CONF,
  DEFAULT_ROOT,
} from './config/locations.js';
export { loadConfigIsolated } from './config/load-isolated.js';
export type { ConfigFlags, LoadedConfig, LogLevel, StoreConfig } from './config/load.js';
export type { MirrorConfig, TlsFiles } from './config/schema.js';
