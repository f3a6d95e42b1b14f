/**
 * Child-process entry of loadConfigIsolated (load-isolated.ts): builds the config from the flags
 * its parent sends and sends back the plain result, or the error's code, message and context.
 */
import { asStoreError } from '../../util/errors.js';
import { loadConfig, type ConfigFlags } from './load.js';
import type { IsolatedReply } from './load-isolated.js';

process.once('message', (flags: ConfigFlags) => {
  void loadConfig(flags)
    .then(
      (loaded): IsolatedReply => ({ ok: true, loaded }),
      (err: unknown): IsolatedReply => {
        const e = asStoreError(err, 'E_CONFIG');
        return { ok: false, code: e.code, message: e.message, context: e.context };
      },
    )
    .then((reply) => process.send?.(reply));
});
