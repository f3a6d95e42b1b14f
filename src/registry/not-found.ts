import type { ErrorContext } from '../util/errors.js';

/**
 * The one-line message of a registry 404: names the image asked for, since "manifest not found"
 * alone leaves the operator guessing which one (`detail` is the registry's error codes, e.g.
 * " (MANIFEST_UNKNOWN)"). A digest that is not part of the ref string (an index's platform
 * manifest) is named too.
 */
export function notFoundMessage(ctx: ErrorContext, detail: string): string {
  const ref = typeof ctx.ref === 'string' ? ctx.ref : undefined;
  const inner =
    typeof ctx.reference === 'string' && !ref?.endsWith(ctx.reference) ? ctx.reference : undefined;
  const of = ref !== undefined ? ` of ${ref}${inner !== undefined ? ` (${inner})` : ''}` : '';
  return `${String(ctx.what ?? 'object')}${of} not found${detail}`;
}
