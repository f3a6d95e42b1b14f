#!/usr/bin/env node
// Thin launcher: the compiled CLI lives in dist/ (npm run build).
import module from 'node:module';
// V8 code cache on disk (Node >= 22.1; in $NODE_COMPILE_CACHE or the temp dir): later runs of the
// CLI skip most compilation. Enabled before the CLI is imported, hence the dynamic import.
module.enableCompileCache?.();
await import('../dist/src/cli/main.js');
