#!/usr/bin/env node
// containers/image additional-layer-store-auth-helper: forwards stdin credentials to the store socket.
import '../dist/src/cli/helper-main.js';
