import { isAbsolute } from 'node:path';
import { z } from 'zod';

/**
 * Building blocks of the declared config schema: one builder per kind of value, each carrying its
 * message (the loader prefixes "config key <name>:" and appends ", got <value>") and its doc text.
 * The schema itself is in schema.ts; these only say how a TOML value of one kind is checked.
 */

/** What the docs table and the loader need to know about a key beyond its type. */
export interface FieldDoc {
  /** One line for docs/config.md. */
  doc: string;
  /** Accepted for Go compatibility but changes nothing here: a debug note when set. */
  noEffect?: boolean;
  /** Accepted, deprecated, ignored (a debug note when set). */
  deprecated?: boolean;
  /** Shown instead of the computed default (e.g. "the host platform"). */
  defaultDoc?: string;
  /** Kind of value for the docs table ("integer", "seconds", ...). */
  kind?: string;
}

/** Docs of every key, looked up by schema object (zod 4 registry: no globals, typed). */
export const fieldDocs = z.registry<FieldDoc>();

export function documented<T extends z.ZodType>(schema: T, doc: FieldDoc): T {
  fieldDocs.add(schema, doc);
  return schema;
}

/** A refinement failure whose ", got" shows `got` (e.g. the effective value, not the raw one). */
export function issue(ctx: z.RefinementCtx, message: string, got: unknown, path?: PropertyKey[]): void {
  ctx.addIssue({ code: 'custom', message, params: { got }, ...(path ? { path } : {}) });
}

type Doc = string | Omit<FieldDoc, 'kind'>;
const asDoc = (d: Doc, kind: string): FieldDoc => (typeof d === 'string' ? { doc: d, kind } : { ...d, kind });

export function bool(def: boolean, doc: Doc) {
  return documented(z.boolean({ error: 'must be true or false' }).default(def), asDoc(doc, 'boolean'));
}

export interface IntOpts {
  /** Smallest accepted value (default 0). */
  min?: number;
  /** Go rule: 0 means the default. */
  zeroIsDefault?: boolean;
  /** Message for values below min (default derived from min). */
  what?: string;
}

export function int(def: number, doc: Doc, o: IntOpts = {}) {
  const min = o.min ?? 0;
  const what =
    o.what ??
    (min === 1
      ? 'must be a positive integer'
      : min === 0
        ? 'must be a non-negative integer'
        : `must be an integer >= ${min}`);
  const error = (i: { input?: unknown }): string =>
    typeof i.input === 'bigint' ? `${what} below 2^53` : what;
  const n = z
    .number({ error })
    .int({ error })
    .refine((v) => (v === 0 && o.zeroIsDefault === true) || v >= min, { error: what })
    .transform((v) => (v === 0 && o.zeroIsDefault === true ? def : v));
  const kind = o.zeroIsDefault === true ? 'integer (0 = default)' : 'integer';
  return documented(n.default(def), asDoc(doc, kind));
}

/** Seconds as a positive finite number (fractions allowed: tests use sub-second deadlines). */
export function seconds(def: number, doc: Doc) {
  const error = 'must be a positive number of seconds';
  return documented(z.number({ error }).positive({ error }).default(def), asDoc(doc, 'seconds'));
}

export function str(def: string, doc: Doc) {
  return documented(z.string({ error: 'must be a string' }).default(def), asDoc(doc, 'string'));
}

/** An absolute path, or '' for "the default / off" (`emptyMeans` says which, in the message). */
export function absPathOrEmpty(def: string, emptyMeans: string, doc: Doc) {
  const error = `must be an absolute path (or "" for ${emptyMeans})`;
  return documented(
    z
      .string({ error })
      .refine((v) => v === '' || isAbsolute(v), { error })
      .default(def),
    asDoc(doc, 'path'),
  );
}

export function oneOf<const T extends readonly [string, ...string[]]>(
  values: T,
  def: T[number],
  doc: Doc,
  o: { emptyIsDefault?: boolean } = {},
) {
  const error = `must be one of ${values.map((x) => JSON.stringify(x)).join(', ')}`;
  const s =
    o.emptyIsDefault === true
      ? z.enum(['', ...values], { error }).transform((v): T[number] => (v === '' ? def : v))
      : z.enum(values, { error });
  return documented(s.default(def as never), asDoc(doc, values.map((v) => `"${v}"`).join(' | ')));
}

/** Accepted and ignored whatever its value (a deprecated Go key). */
export function ignored(doc: string) {
  return documented(z.unknown().optional(), { doc, deprecated: true, kind: 'any' });
}

type CamelCase<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<CamelCase<T>>}` : S;
export type Camelized<T> = { [K in keyof T as K extends string ? CamelCase<K> : K]: T[K] };

export function camel(key: string): string {
  return key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function camelize<T extends object>(o: T): Camelized<T> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[camel(k)] = v;
  return out as Camelized<T>;
}

/**
 * A TOML table: snake_case keys in the file, camelCase in StoreConfig. Absent = empty table (so the
 * defaults of its keys apply). `doc` describes the table in docs/config.md.
 */
export function table<S extends z.ZodRawShape>(
  shape: S,
  doc?: Doc,
  refine?: (t: Camelized<z.output<z.ZodObject<S>>>, ctx: z.RefinementCtx) => void,
) {
  const base = z
    .object(shape, { error: 'must be a table' })
    .transform((o) => camelize(o))
    // absent table: parse {} so every key's default applies
    .prefault({} as never);
  const t = refine ? base.superRefine(refine) : base;
  if (doc !== undefined) fieldDocs.add(t, asDoc(doc, 'table'));
  return t;
}

/** The same without the absent = empty rule (array-of-tables elements, host entries). */
export function entry<S extends z.ZodRawShape>(shape: S) {
  return z.object(shape, { error: 'must be a table' });
}
