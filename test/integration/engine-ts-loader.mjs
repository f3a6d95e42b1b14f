// `node --import ./engine-ts-loader.mjs child.ts`: registers engine-ts-hooks.mjs.
import { register } from 'node:module';

register('./engine-ts-hooks.mjs', import.meta.url);
