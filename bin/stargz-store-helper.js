#!/usr/bin/env node
// containers/image additional-layer-store-auth-helper: forwards stdin credentials to the store socket.
import module from 'node:module';
// c/image runs the helper before every pull: the on-disk code cache keeps its start-up short.
module.enableCompileCache?.();
await import('../dist/src/cli/helper-main.js');
