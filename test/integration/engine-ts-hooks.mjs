// Module hooks so a child `node` process can run the TypeScript sources directly (restart test):
// `.js` imports resolve to the `.ts` file next to them, and `.ts` files are transpiled in memory.
// Transpiled output is kept in a temp dir keyed by the source's hash, so the many short-lived
// store processes of the integration tests (crash suite, restarts) neither load TypeScript nor
// transpile again (a start costs seconds of CPU otherwise on a busy machine).
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, URL } from 'node:url';

const CACHE = join(tmpdir(), 'sgz-ts-transpiled-v1');
let ts;

export async function resolve(specifier, context, next) {
  const parent = context.parentURL;
  if (parent?.endsWith('.ts') && /^(\.{1,2})?\//.test(specifier) && specifier.endsWith('.js')) {
    const js = new URL(specifier, parent);
    const tsUrl = new URL(js.href.slice(0, -3) + '.ts');
    if (!existsSync(fileURLToPath(js)) && existsSync(fileURLToPath(tsUrl))) {
      return { url: tsUrl.href, format: 'module', shortCircuit: true };
    }
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.endsWith('.ts')) return next(url, context);
  const file = fileURLToPath(url);
  const text = await readFile(file, 'utf8');
  const cached = join(
    CACHE,
    createHash('sha256').update(file).update('\0').update(text).digest('hex') + '.js',
  );
  const hit = await readFile(cached, 'utf8').catch(() => undefined);
  if (hit !== undefined) return { format: 'module', source: hit, shortCircuit: true };
  ts ??= (await import('typescript')).default;
  const out = ts.transpileModule(text, {
    fileName: file,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, sourceMap: false },
  });
  // a temp file renamed into place: concurrent processes never read half an entry
  const tmp = `${cached}.${randomBytes(6).toString('hex')}.tmp`;
  await mkdir(CACHE, { recursive: true })
    .then(() => writeFile(tmp, out.outputText))
    .then(() => rename(tmp, cached))
    .catch(() => undefined);
  return { format: 'module', source: out.outputText, shortCircuit: true };
}
