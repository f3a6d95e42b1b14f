import type { Dispatcher } from 'undici';
import { request } from './undici-core.js';
import { StoreError } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { Lru } from '../util/lru.js';
import { SingleFlight } from '../util/single-flight.js';
import { parseWwwAuthenticate, type Challenge } from './challenge.js';
import { hasSecret, type CredentialProvider, type Credentials } from './credentials.js';
import type { Endpoint } from './hosts.js';
import { DOCKER_HUB, DOCKER_HUB_API_HOST } from './reference.js';
import { collectBody } from './response-body.js';

/** What a request is for: the endpoint, the token scope and the image (credential lookup). */
export interface AuthContext {
  ep: Endpoint;
  /** e.g. `repository:library/alpine:pull` */
  scope: string;
  /** The image reference string being pulled (helper-channel credentials are keyed by it). */
  ref: string;
}

interface BearerParams {
  realm: string;
  service?: string;
}

interface CachedToken {
  header: string;
  /** ms epoch after which the token is not used any more */
  expiresAt: number;
}

/** Tokens the registry gave us are reused until shortly before their announced expiry. */
const EXPIRY_MARGIN_MS = 5_000;
const DEFAULT_TOKEN_LIFETIME_S = 60;
const MAX_TOKEN_RESPONSE = 1 << 20;
const CLIENT_ID = 'stargz-store-ts';
/** Tokens are per origin + repository: bound them (an evicted live token is just fetched again). */
const MAX_TOKENS = 4096;

export type DispatcherFor = (ep: Endpoint) => Promise<Dispatcher>;

/**
 * Registry authorisation (containerd's docker authorizer, re-thought): per origin the last
 * challenge (Basic or Bearer realm/service), per origin+scope a token with its expiry. Requests
 * carry the cached header; a 401 feeds its challenge here and the request is sent once more.
 * Concurrent 401s for the same origin+scope share one token fetch.
 */
export class Authorizer {
  private readonly challenges = new Map<
    string,
    { kind: 'basic' } | { kind: 'bearer'; params: BearerParams }
  >();
  /** Expired tokens are dropped when read and swept as new ones arrive. */
  private readonly tokens = new Lru<string, CachedToken>({ maxEntries: MAX_TOKENS });
  /** Concurrent 401s for one origin+scope share one token fetch. */
  private readonly tokenFetches = new SingleFlight<string, string>();
  /** number of token requests sent (tests and metrics) */
  tokenRequests = 0;

  constructor(
    private readonly credentials: CredentialProvider | undefined,
    private readonly dispatcherFor: DispatcherFor,
    private readonly logger: Logger = silentLogger,
    private readonly userAgent = 'stargz-store-ts',
    /** A shared token fetch gives up after this long (it runs under no caller's signal). */
    private readonly tokenTimeoutMs = 30_000,
  ) {}

  /** Tokens held right now (memory bounds). */
  get cachedTokens(): number {
    return this.tokens.size;
  }

  private key(ctx: AuthContext): string {
    return `${ctx.ep.origin}|${ctx.scope}`;
  }

  /** The Authorization header to send now, fetching a fresh token when the cached one expired. */
  async headerFor(ctx: AuthContext, signal?: AbortSignal): Promise<string | undefined> {
    const ch = this.challenges.get(ctx.ep.origin);
    if (!ch) return undefined;
    if (ch.kind === 'basic') return this.basicHeader(ctx, signal);
    const tok = this.tokens.get(this.key(ctx));
    if (tok && Date.now() < tok.expiresAt) return tok.header;
    return this.fetchTokenOnce(ctx, ch.params, signal);
  }

  /**
   * Handle a 401: remember the challenge, drop the token that was refused, and return the header
   * for the single retry. No usable challenge or rejected credentials -> E_REGISTRY_UNAUTHORIZED.
   */
  async onUnauthorized(
    ctx: AuthContext,
    wwwAuthenticate: string | string[] | undefined,
    refused: string | undefined,
    signal?: AbortSignal,
  ): Promise<string> {
    const challenges = parseWwwAuthenticate(wwwAuthenticate);
    const bearer = challenges.find((c) => c.scheme === 'bearer' && c.params.realm);
    const basic = challenges.find((c) => c.scheme === 'basic');
    const k = this.key(ctx);
    const cached = this.tokens.get(k);
    if (cached && cached.header === refused) this.tokens.delete(k);
    if (bearer) {
      const params: BearerParams = { realm: bearer.params.realm! };
      if (bearer.params.service !== undefined) params.service = bearer.params.service;
      this.challenges.set(ctx.ep.origin, { kind: 'bearer', params });
      // a token fetched by a concurrent request after ours was refused is good to use
      const fresh = this.tokens.get(k);
      if (fresh && fresh.header !== refused && Date.now() < fresh.expiresAt) return fresh.header;
      return this.fetchTokenOnce(ctx, params, signal, scopeFrom(bearer, ctx.scope));
    }
    if (basic) {
      this.challenges.set(ctx.ep.origin, { kind: 'basic' });
      const h = await this.basicHeader(ctx, signal);
      if (h === undefined || h === refused)
        throw this.unauthorized(ctx, h === undefined ? 'no credentials' : 'credentials rejected');
      return h;
    }
    throw this.unauthorized(ctx, 'no supported WWW-Authenticate challenge');
  }

  private unauthorized(ctx: AuthContext, why: string): StoreError {
    return new StoreError('E_REGISTRY_UNAUTHORIZED', `registry ${ctx.ep.host} refused access (${why})`, {
      host: ctx.ep.host,
      repository: ctx.ep.repository,
      ref: ctx.ref,
    });
  }

  private async credentialsFor(ctx: AuthContext, signal?: AbortSignal): Promise<Credentials | undefined> {
    if (!this.credentials) return undefined;
    const host = ctx.ep.host === DOCKER_HUB_API_HOST ? DOCKER_HUB : ctx.ep.host;
    return this.credentials.get(
      { host, repository: ctx.ep.repository, ref: ctx.ref, isUpstream: ctx.ep.isUpstream },
      signal,
    );
  }

  private async basicHeader(ctx: AuthContext, signal?: AbortSignal): Promise<string | undefined> {
    const c = await this.credentialsFor(ctx, signal);
    if (!hasSecret(c) || !c.username) return undefined;
    return `Basic ${Buffer.from(`${c.username}:${c.password ?? ''}`).toString('base64')}`;
  }

  private fetchTokenOnce(
    ctx: AuthContext,
    params: BearerParams,
    signal?: AbortSignal,
    scope = ctx.scope,
  ): Promise<string> {
    // one caller giving up (its read's deadline) must not fail the others waiting on the token.
    // The shared fetch has the endpoint's request timeout (none when it is negative); running
    // past it is a network failure, which the caller's retry policy may retry with a new fetch.
    const configured = ctx.ep.options.requestTimeoutMs ?? this.tokenTimeoutMs;
    const ms = configured < 0 ? Infinity : configured;
    return this.tokenFetches.share(
      this.key(ctx),
      signal,
      ms,
      () =>
        new StoreError('E_REGISTRY_NETWORK', `token fetch from ${params.realm} took longer than ${ms} ms`, {
          host: ctx.ep.host,
        }),
      (own) => this.fetchToken(ctx, params, scope, own),
    );
  }

  private async fetchToken(
    ctx: AuthContext,
    params: BearerParams,
    scope: string,
    signal?: AbortSignal,
  ): Promise<string> {
    const creds = await this.credentialsFor(ctx, signal);
    const dispatcher = await this.dispatcherFor(ctx.ep);
    let realm: URL;
    try {
      realm = new URL(params.realm);
    } catch {
      throw new StoreError('E_REGISTRY_PROTOCOL', 'token realm is not a URL', { host: ctx.ep.host });
    }
    if (realm.protocol !== 'https:' && realm.protocol !== 'http:') {
      throw new StoreError('E_REGISTRY_PROTOCOL', 'token realm is not http(s)', { host: ctx.ep.host });
    }
    const started = Date.now();
    let res: { status: number; body: Record<string, unknown> } | undefined;
    if (hasSecret(creds)) {
      // OAuth2 first (refresh token or password grant); registries without it answer 404/405/400/401.
      const form = new URLSearchParams();
      if (creds.identityToken) {
        form.set('grant_type', 'refresh_token');
        form.set('refresh_token', creds.identityToken);
      } else {
        form.set('grant_type', 'password');
        form.set('username', creds.username!);
        form.set('password', creds.password ?? '');
      }
      if (params.service !== undefined) form.set('service', params.service);
      form.set('scope', scope);
      form.set('client_id', CLIENT_ID);
      res = await this.tokenRequest(realm, 'POST', dispatcher, ctx, signal, form.toString());
      const fallback = res.status === 404 || res.status === 401 || res.status === 400 || res.status === 405;
      if (fallback && creds.username) {
        res = await this.tokenRequest(
          realm,
          'GET',
          dispatcher,
          ctx,
          signal,
          undefined,
          params.service,
          scope,
          creds,
        );
      }
    } else {
      res = await this.tokenRequest(realm, 'GET', dispatcher, ctx, signal, undefined, params.service, scope);
    }
    if (res.status === 401 || res.status === 403)
      throw this.unauthorized(ctx, `token server answered ${res.status}`);
    if (res.status !== 200) {
      throw new StoreError('E_REGISTRY_STATUS', `token server answered ${res.status}`, {
        host: ctx.ep.host,
        status: res.status,
      });
    }
    const token =
      typeof res.body.token === 'string' && res.body.token ? res.body.token : res.body.access_token;
    if (typeof token !== 'string' || token === '') {
      throw new StoreError('E_REGISTRY_PROTOCOL', 'token server response has no token', {
        host: ctx.ep.host,
      });
    }
    const lifetime =
      typeof res.body.expires_in === 'number' && res.body.expires_in > 0
        ? res.body.expires_in
        : DEFAULT_TOKEN_LIFETIME_S;
    const issued = typeof res.body.issued_at === 'string' ? Date.parse(res.body.issued_at) : NaN;
    // a skewed server clock must not make us keep a token longer than the server meant
    const base = Number.isNaN(issued) ? started : Math.min(started, issued);
    const header = `Bearer ${token}`;
    const expiresAt = base + lifetime * 1000 - EXPIRY_MARGIN_MS;
    this.tokens.set(this.key(ctx), { header, expiresAt }, expiresAt);
    this.logger.debug({ host: ctx.ep.host, scope, expiresInSec: lifetime }, 'registry token obtained');
    return header;
  }

  private async tokenRequest(
    realm: URL,
    method: 'GET' | 'POST',
    dispatcher: Dispatcher,
    ctx: AuthContext,
    signal: AbortSignal | undefined,
    form?: string,
    service?: string,
    scope?: string,
    basic?: Credentials,
  ): Promise<{ status: number; body: Record<string, unknown> }> {
    const url = new URL(realm);
    const headers: Record<string, string> = { 'user-agent': this.userAgent, accept: 'application/json' };
    if (method === 'GET') {
      if (service !== undefined) url.searchParams.set('service', service);
      if (scope) url.searchParams.set('scope', scope);
      if (basic?.username) {
        headers.authorization = `Basic ${Buffer.from(`${basic.username}:${basic.password ?? ''}`).toString('base64')}`;
      }
    } else {
      headers['content-type'] = 'application/x-www-form-urlencoded';
    }
    this.tokenRequests++;
    let res;
    try {
      res = await request(url, { method, headers, body: form, dispatcher, signal: signal ?? null });
    } catch (err) {
      if (signal?.aborted) throw err;
      throw new StoreError(
        'E_REGISTRY_NETWORK',
        `token server ${url.host} unreachable`,
        { host: ctx.ep.host },
        { cause: err },
      );
    }
    const raw = await collectBody(
      res.body,
      MAX_TOKEN_RESPONSE,
      () => new StoreError('E_TOO_LARGE', 'token response too large', { host: ctx.ep.host }),
    );
    let body: Record<string, unknown> = {};
    if (res.statusCode === 200) {
      try {
        const parsed: unknown = JSON.parse(raw.toString('utf8'));
        if (typeof parsed === 'object' && parsed !== null) body = parsed as Record<string, unknown>;
      } catch {
        throw new StoreError('E_REGISTRY_PROTOCOL', 'token response is not JSON', { host: ctx.ep.host });
      }
    }
    return { status: res.statusCode, body };
  }
}

/** Prefer the scope the registry asked for when it names our repository; else ours. */
function scopeFrom(ch: Challenge, ours: string): string {
  const s = ch.params.scope;
  if (!s) return ours;
  return s.split(' ').includes(ours) ? s : `${ours}`;
}
