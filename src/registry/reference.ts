import { isValidDigest, type Digest } from '../util/digest.js';

// the one digest rule (util/digest.ts), re-exported for the reference's users
export { isValidDigest } from '../util/digest.js';
import { StoreError } from '../util/errors.js';

/**
 * An image reference in its fully qualified form. Docker Hub names are normalised the way the
 * container tools do it (`alpine` -> `docker.io/library/alpine:latest`), so the same image always
 * has the same string (the ALS directory name and the helper-channel credential key depend on it).
 */
export interface ImageRef {
  /** Registry host as written in the reference (`docker.io`, `127.0.0.1:5000`, `[::1]:5000`). */
  readonly registry: string;
  /** Repository path inside the registry (`library/alpine`). */
  readonly repository: string;
  readonly tag?: string;
  /** `algorithm:hex` */
  readonly digest?: Digest;
  /** `registry/repository[:tag][@digest]` */
  toString(): string;
}

export const DOCKER_HUB = 'docker.io';
/** The host that actually serves docker.io's API. */
export const DOCKER_HUB_API_HOST = 'registry-1.docker.io';

const MAX_NAME_LENGTH = 255;
// One path component: lowercase alphanumerics joined by '.', '_', '__' or runs of '-'.
const COMPONENT = /^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
// host name labels, optional port; or a bracketed IPv6 literal with optional port
const DOMAIN_NAME =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?))*(?::[0-9]+)?$/;
const DOMAIN_IPV6 = /^\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?\](?::[0-9]+)?$/;

class Ref implements ImageRef {
  /** The canonical form, built once: the store keys names and records by it on every lookup. */
  readonly #canonical: string;

  constructor(
    readonly registry: string,
    readonly repository: string,
    readonly tag: string | undefined,
    readonly digest: Digest | undefined,
  ) {
    let s = `${registry}/${repository}`;
    if (tag !== undefined) s += `:${tag}`;
    if (digest !== undefined) s += `@${digest}`;
    this.#canonical = s;
  }
  toString(): string {
    return this.#canonical;
  }
  toJSON(): string {
    return this.toString();
  }
}

function bad(input: string, why: string): StoreError {
  return new StoreError('E_BAD_REFERENCE', `invalid image reference "${input.slice(0, 300)}": ${why}`, {
    ref: input.slice(0, 300),
  });
}

function looksLikeDomain(first: string): boolean {
  return (
    first.includes('.') ||
    first.includes(':') ||
    first === 'localhost' ||
    first.startsWith('[') ||
    first !== first.toLowerCase()
  );
}

/**
 * Parse and normalise an image reference:
 * `[registry[:port]/]repo/path[:tag][@algo:hex]`, IPv6 registries in brackets.
 * Without tag and digest the tag `latest` is implied.
 */
export function parseReference(input: string): ImageRef {
  if (typeof input !== 'string' || input.length === 0) throw bad(String(input), 'empty');
  if (input.length > 4096) throw bad(input, 'too long');
  let rest = input;
  let digest: Digest | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    const d = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!isValidDigest(d)) throw bad(input, `bad digest "${d.slice(0, 80)}"`);
    digest = d;
  }
  // split off the registry first: its port colon must not be taken for a tag separator
  let registry: string;
  let path: string;
  const slash = rest.indexOf('/');
  if (slash > 0 && looksLikeDomain(rest.slice(0, slash))) {
    registry = rest.slice(0, slash);
    path = rest.slice(slash + 1);
  } else {
    registry = DOCKER_HUB;
    path = rest;
  }
  let tag: string | undefined;
  const colon = path.lastIndexOf(':');
  if (colon >= 0) {
    tag = path.slice(colon + 1);
    path = path.slice(0, colon);
    if (!TAG.test(tag)) throw bad(input, `bad tag "${tag.slice(0, 80)}"`);
  }
  if (!DOMAIN_NAME.test(registry) && !DOMAIN_IPV6.test(registry))
    throw bad(input, `bad registry "${registry}"`);
  // Case is kept as written (like docker): an upper-case first component is what makes it a host.
  if (registry === 'index.docker.io' || registry === DOCKER_HUB_API_HOST) registry = DOCKER_HUB;
  if (path.length === 0) throw bad(input, 'missing repository');
  const parts = path.split('/');
  for (const p of parts) {
    if (!COMPONENT.test(p)) throw bad(input, `bad repository component "${p.slice(0, 80)}"`);
  }
  if (registry === DOCKER_HUB && parts.length === 1) path = `library/${path}`;
  if (registry.length + 1 + path.length > MAX_NAME_LENGTH)
    throw bad(input, 'name longer than 255 characters');
  if (tag === undefined && digest === undefined) tag = 'latest';
  return new Ref(registry, path, tag, digest);
}

/**
 * Decode an ALS path component: the reference string in standard base64 WITH padding (what
 * containers/storage writes). Anything else is E_INVALID_ARGUMENT, so a stray lookup
 * (`.Trash`, a typo) never turns into a registry request.
 */
export function decodeAlsRefName(name: string): string {
  const fail = (why: string) =>
    new StoreError('E_INVALID_ARGUMENT', `not an ALS reference name: ${why}`, { name: name.slice(0, 300) });
  if (name.length === 0 || name.length % 4 !== 0) throw fail('length is not a multiple of 4');
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(name)) throw fail('not standard base64');
  const buf = Buffer.from(name, 'base64');
  // Node ignores non-canonical trailing bits; re-encoding catches them.
  if (buf.toString('base64') !== name) throw fail('non-canonical base64');
  const text = new TextDecoder('utf-8', { fatal: false }).decode(buf);
  if (Buffer.from(text, 'utf8').equals(buf) === false || text.includes('\uFFFD')) throw fail('not UTF-8');
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x20\x7f]/.test(text)) throw fail('contains control characters or spaces');
  return text;
}

export function encodeAlsRefName(ref: string): string {
  return Buffer.from(ref, 'utf8').toString('base64');
}
