import { StoreError } from '../util/errors.js';

/** Longest cleaned path accepted (Linux PATH_MAX). */
export const MAX_PATH_BYTES = 4096;
/** Longest single path component accepted (Linux NAME_MAX). */
export const MAX_NAME_BYTES = 255;

/** `.`/`..` components, empty components, a leading or a trailing slash. */
const NEEDS_CLEANING = /(?:^|\/)\.\.?(?:\/|$)|\/\/|^\/|\/$/;

/**
 * Clean a TOC name the way the Go reader does (`path.Clean("/" + name)` minus the leading
 * slash): `./a/../b`, `/b` and `b` are the same entry, `..` never climbs above the root, and
 * the root itself is ''. NUL bytes and over-long paths/components are refused.
 */
export function cleanEntryName(name: string, context: { entry?: number } = {}): string {
  if (name.includes('\0')) {
    throw new StoreError('E_HOSTILE_PATH', 'TOC name contains a NUL byte', {
      ...context,
      name: printable(name),
    });
  }
  // Fast path: most names are clean ('a/b.txt') or only carry the tar-style './' prefix and
  // a directory's trailing '/' ('./etc/', './etc/passwd'); only split the others.
  let clean = name;
  if (clean.startsWith('./')) clean = clean.slice(2);
  if (clean.endsWith('/')) clean = clean.slice(0, -1);
  if (NEEDS_CLEANING.test(clean)) {
    const parts: string[] = [];
    for (const part of name.split('/')) {
      if (part === '' || part === '.') continue;
      if (part === '..') parts.pop();
      else parts.push(part);
    }
    clean = parts.join('/');
  }
  // UTF-8 needs at most 3 bytes per UTF-16 unit: short names skip the byte counting
  if (clean.length * 3 > MAX_NAME_BYTES) checkLengths(clean, context);
  return clean;
}

function checkLengths(clean: string, context: { entry?: number }): void {
  if (Buffer.byteLength(clean) > MAX_PATH_BYTES) {
    throw new StoreError('E_HOSTILE_PATH', `TOC path longer than ${MAX_PATH_BYTES} bytes`, {
      ...context,
      name: printable(clean),
    });
  }
  for (const part of clean.split('/')) {
    if (part.length * 3 > MAX_NAME_BYTES && Buffer.byteLength(part) > MAX_NAME_BYTES) {
      throw new StoreError('E_HOSTILE_PATH', `TOC path component longer than ${MAX_NAME_BYTES} bytes`, {
        ...context,
        name: printable(clean),
      });
    }
  }
}

/** Short, log-safe rendering of a hostile name. */
function printable(name: string): string {
  const shown = JSON.stringify(name);
  return shown.length > 200 ? shown.slice(0, 200) + '…' : shown;
}

export function splitParent(path: string): [dir: string, base: string] {
  const slash = path.lastIndexOf('/');
  return slash < 0 ? ['', path] : [path.slice(0, slash), path.slice(slash + 1)];
}
