import { writeFile } from 'node:fs/promises';
import { renderConfigDocs } from './docs.js';

/** `npm run docs:config`: (re)writes docs/config.md from the schema (run from the repository root). */
await writeFile('docs/config.md', renderConfigDocs());
process.stdout.write('wrote docs/config.md\n');
