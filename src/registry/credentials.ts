import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { Lru } from '../util/lru.js';
import { parseReference } from './reference.js';

/** A secret for one registry. Never logged, never put in errors. */
export interface Credentials {
  username?: string;
  password?: string;
  /** OAuth2 refresh token (docker `identitytoken`); wins over username/password. */
  identityToken?: string;
}

export interface CredentialQuery {
  /** Registry host as users write it (`docker.io`, not `registry-1.docker.io`), or the mirror host. */
  host: string;
  /** Repository path at that host. */
  repository: string;
  /** The full image reference being pulled (`docker.io/library/alpine:latest`). */
  ref: string;
  /** False for mirrors: per-reference credentials must only go to the registry they were given for. */
  isUpstream: boolean;
}

export interface CredentialProvider {
  readonly name: string;
  get(query: CredentialQuery, signal?: AbortSignal): Promise<Credentials | undefined>;
}

export function hasSecret(c: Credentials | undefined): c is Credentials {
  return !!c && (!!c.identityToken || (!!c.username && c.password !== undefined && c.password !== ''));
}

/** The helper-channel payload: `{"<ref>":{"username","password","identityToken"}}`. */
export type HelperCredentialMap = Record<
  string,
  { username?: string; password?: string; identityToken?: string }
>;

const MAX_HELPER_CREDENTIALS = 4096;

/**
 * Credentials pushed at run time by containers/image's `additional-layer-store-auth-helper`.
 * Kept in memory only; looked up by the reference being pulled, and only for requests to that
 * reference's own registry (never mirrors), like the Go store.
 */
export class MemoryCredentialProvider implements CredentialProvider {
  readonly name = 'helper';
  // The helper pushes on every pull: keep the most recent ones only (an evicted entry comes back
  // with the next pull of that image).
  private readonly byRef = new Lru<string, Credentials>({ maxEntries: MAX_HELPER_CREDENTIALS });
  private readonly byRepo = new Lru<string, Credentials>({ maxEntries: MAX_HELPER_CREDENTIALS });

  /** Merge a map (replacing entries with the same reference). Invalid input -> E_INVALID_ARGUMENT. */
  addCredentials(map: unknown): number {
    if (typeof map !== 'object' || map === null || Array.isArray(map)) {
      throw new StoreError(
        'E_INVALID_ARGUMENT',
        'credentials must be a JSON object keyed by image reference',
      );
    }
    let n = 0;
    for (const [key, raw] of Object.entries(map as Record<string, unknown>)) {
      if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
        throw new StoreError('E_INVALID_ARGUMENT', 'credential entry must be an object', {
          ref: key.slice(0, 300),
        });
      }
      const r = raw as Record<string, unknown>;
      const c: Credentials = {};
      for (const f of ['username', 'password', 'identityToken'] as const) {
        const v = r[f];
        if (v === undefined || v === null || v === '') continue;
        if (typeof v !== 'string') {
          throw new StoreError('E_INVALID_ARGUMENT', `credential field ${f} must be a string`, {
            ref: key.slice(0, 300),
          });
        }
        c[f] = v;
      }
      let ref;
      try {
        ref = parseReference(key);
      } catch {
        throw new StoreError('E_INVALID_ARGUMENT', 'credential key is not an image reference', {
          ref: key.slice(0, 300),
        });
      }
      this.byRef.set(ref.toString(), c);
      this.byRepo.set(`${ref.registry}/${ref.repository}`, c);
      n++;
    }
    return n;
  }

  /** Parse and merge the helper's stdin bytes. */
  addCredentialsJson(text: string): number {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new StoreError('E_INVALID_ARGUMENT', 'credentials payload is not JSON');
    }
    return this.addCredentials(parsed);
  }

  async get(q: CredentialQuery): Promise<Credentials | undefined> {
    if (!q.isUpstream) return undefined;
    let key = q.ref;
    try {
      key = parseReference(q.ref).toString();
    } catch {
      /* lookup by the raw string */
    }
    const c = this.byRef.get(key) ?? this.byRepo.get(`${q.host}/${q.repository}`);
    if (!hasSecret(c)) return undefined;
    return c.identityToken
      ? { identityToken: c.identityToken }
      : { username: c.username!, password: c.password! };
  }

  get size(): number {
    return this.byRef.size;
  }
}

/** Tries providers in order; the first one with a secret wins. Provider failures are logged and skipped. */
export class CredentialChain implements CredentialProvider {
  readonly name = 'chain';
  constructor(
    private readonly providers: CredentialProvider[],
    private readonly logger: Logger = silentLogger,
  ) {}

  async get(q: CredentialQuery, signal?: AbortSignal): Promise<Credentials | undefined> {
    for (const p of this.providers) {
      try {
        const c = await p.get(q, signal);
        if (hasSecret(c)) {
          this.logger.debug({ provider: p.name, host: q.host }, 'using registry credentials');
          return c;
        }
      } catch (err) {
        const code = err instanceof StoreError ? err.code : 'E_IO';
        this.logger.warn({ provider: p.name, host: q.host, code }, 'credential provider failed');
      }
    }
    return undefined;
  }
}
