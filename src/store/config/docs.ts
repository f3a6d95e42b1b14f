import type { z } from 'zod';
import { fieldDocs } from './fields.js';
import { fileSchema } from './schema.js';

/**
 * docs/config.md, rendered from the declared schema: every table, every key, its kind, default and
 * meaning. `npm run docs:config` writes it; test/unit/config-docs.test.ts fails when it is stale.
 */

type Schema = z.core.$ZodType;
type Def = { type: string; [k: string]: unknown };

export interface KeyDoc {
  key: string;
  kind: string;
  default: string;
  doc: string;
  noEffect: boolean;
  deprecated: boolean;
}

export interface TableDoc {
  /** `top level`, `[blob]`, `[resolver.host."<host>"]`, `[[resolver.host."<host>".mirrors]]`. */
  header: string;
  doc: string;
  keys: KeyDoc[];
}

const def = (s: Schema): Def => s._zod.def as unknown as Def;

/** The structural schemas a key may take (wrappers removed, union options listed). */
function shapes(s: Schema): Schema[] {
  const d = def(s);
  if (d.type === 'pipe') return shapes(d.in as Schema);
  if (['default', 'prefault', 'optional', 'nullable', 'readonly'].includes(d.type))
    return shapes(d.innerType as Schema);
  if (d.type === 'union') return (d.options as Schema[]).flatMap(shapes);
  return [s];
}

function toml(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(toml).join(', ')}]`;
  if (v !== null && typeof v === 'object')
    return Object.keys(v).length === 0 ? '{}' : JSON.stringify(v).replace(/:/g, ' = ');
  return String(v);
}

function keyDoc(key: string, s: Schema): KeyDoc {
  const meta = fieldDocs.get(s);
  let dflt = meta?.defaultDoc;
  if (dflt === undefined) {
    const r = (s as z.ZodType).safeParse(undefined);
    dflt = r.success && r.data !== undefined ? toml(r.data) : '';
  }
  return {
    key,
    kind: meta?.kind ?? '',
    default: dflt,
    doc: meta?.doc ?? '',
    noEffect: meta?.noEffect === true,
    deprecated: meta?.deprecated === true,
  };
}

function visit(path: string, header: string, s: Schema, out: TableDoc[]): void {
  const obj = shapes(s)
    .map(def)
    .find((d) => d.type === 'object');
  if (!obj) return;
  const table: TableDoc = { header, doc: fieldDocs.get(s)?.doc ?? '', keys: [] };
  out.push(table);
  const nested: [string, string, Schema][] = [];
  for (const [k, c] of Object.entries(obj.shape as Record<string, Schema>)) {
    const p = path === '' ? k : `${path}.${k}`;
    const options = shapes(c);
    if (options.some((o) => !isTable(o) && def(o).type !== 'record')) table.keys.push(keyDoc(k, c));
    for (const o of options) {
      const d = def(o);
      // a union option that is a table ([debug]) is documented by itself, not by the key's doc
      if (d.type === 'object') nested.push([p, `[${p}]`, options.length > 1 ? o : c]);
      else if (d.type === 'record' && shapes(d.valueType as Schema).some(isTable))
        nested.push([`${p}."<host>"`, `[${p}."<host>"]`, d.valueType as Schema]);
      else if (isTable(o)) nested.push([p, `[[${p}]]`, d.element as Schema]);
    }
  }
  for (const [p, h, c] of nested) visit(p, h, c, out);
}

/** A table, or an array of tables. */
function isTable(s: Schema): boolean {
  const d = def(s);
  return d.type === 'object' || (d.type === 'array' && shapes(d.element as Schema).some(isTable));
}

/** Every table of config.toml with its keys, in schema order. */
export function configTables(): TableDoc[] {
  const out: TableDoc[] = [];
  visit('', 'top level', fileSchema, out);
  return out;
}

const cell = (s: string): string => s.replace(/\|/g, '\\|');

export function renderConfigDocs(): string {
  const lines = [
    '# config.toml reference',
    '',
    '<!-- generated from src/store/config/schema.ts by `npm run docs:config`; do not edit by hand -->',
    '',
    'The store reads `/etc/stargz-store/config.toml` (`--config FILE`), then applies `--set key=value`',
    'flags (dotted keys, TOML values: `--set blob.chunk_size=100000`). Keys of the Go stargz-store keep',
    'their names and defaults, and for their numeric keys 0 also means "the default". Keys marked',
    '(no effect) are accepted for compatibility and logged at debug level. Unknown keys are logged as',
    'warnings naming the key; a bad value stops start-up with a one-line message naming the key.',
    'The commented example with every default is `systemd/config.toml`.',
  ];
  for (const t of configTables()) {
    lines.push('', `## ${t.header === 'top level' ? 'Top level' : `\`${t.header}\``}`, '');
    if (t.doc !== '') lines.push(`${t.doc[0]!.toUpperCase()}${t.doc.slice(1)}.`, '');
    lines.push('| key | type | default | meaning |', '| --- | --- | --- | --- |');
    for (const k of t.keys) {
      const tag = k.noEffect ? '(no effect) ' : k.deprecated ? '(deprecated, ignored) ' : '';
      const dflt = k.default === '' ? '' : `\`${cell(k.default)}\``;
      lines.push(`| \`${k.key}\` | ${cell(k.kind)} | ${dflt} | ${cell(tag + k.doc)} |`);
    }
  }
  return lines.join('\n') + '\n';
}
