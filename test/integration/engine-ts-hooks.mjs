// Module hooks so a child `node` process can run the TypeScript sources directly (restart test):
// `.js` imports resolve to the `.ts` file next to them, and `.ts` files are transpiled in memory.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath, URL } from 'node:url';
import ts from 'typescript';

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
  const out = ts.transpileModule(await readFile(file, 'utf8'), {
    fileName: file,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, sourceMap: false },
  });
  return { format: 'module', source: out.outputText, shortCircuit: true };
}
