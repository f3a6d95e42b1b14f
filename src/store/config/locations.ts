import { DEFAULT_CONTROL_SOCKET, DEFAULT_ROOT } from '../../util/root-layout.js';

/**
 * The config's default locations, in a module of their own: the CLI commands name them in their
 * help, and importing them must not load the schema library (see load-isolated.ts).
 */
export const DEFAULT_CONFIG_PATH = '/etc/stargz-store/config.toml';
export const DEFAULT_ADDR = DEFAULT_CONTROL_SOCKET;
export const DEFAULT_REGISTRIES_CONF = '/etc/containers/registries.conf';
export { DEFAULT_ROOT };
