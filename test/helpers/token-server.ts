import { createPrivateKey, randomUUID, sign, X509Certificate } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { makeSigningCert } from './tls.js';

/**
 * A minimal Docker token server (distribution "token" auth) on 127.0.0.1: GET with optional
 * Basic credentials and OAuth2 POST (password and refresh_token grants). Tokens are JWTs signed
 * RS256 or ES256 with a self-signed certificate carried in the `x5c` header, which the registry
 * trusts through `rootcertbundle`.
 */
export interface TokenServerOptions {
  alg?: 'RS256' | 'ES256';
  service?: string;
  issuer?: string;
  users?: Record<string, string>;
  /** refresh token -> user name */
  refreshTokens?: Record<string, string>;
  /** may anonymous clients pull? */
  anonymousPull?: boolean;
  /**
   * How long the registry will accept a token. docker-registry allows 60 s of clock leeway past
   * `exp`, so `exp` is set to now + validForSec - 60.
   */
  validForSec?: number;
  /** `expires_in` told to the client (may differ from the real validity to simulate revocation). */
  advertisedExpiresIn?: number;
  /** answer OAuth2 POSTs with 404 (forces the GET fallback) */
  noOAuth?: boolean;
}

export interface TokenRequestLog {
  method: string;
  grant?: string;
  basicUser?: string;
  scope?: string;
  service?: string;
  status: number;
}

export interface TokenServer {
  realm: string;
  service: string;
  issuer: string;
  /** PEM bundle path for the registry's rootcertbundle */
  rootCertBundle: string;
  requests: TokenRequestLog[];
  /** every token handed out (to check that none leaks into logs) */
  issued: string[];
  /** mint a token directly (e.g. push access for test setup) */
  mint(subject: string, access: Array<{ type: string; name: string; actions: string[] }>): string;
  setOptions(o: Partial<TokenServerOptions>): void;
  stop(): Promise<void>;
}

const LEEWAY_SEC = 60;

function b64url(b: Buffer | string): string {
  return Buffer.from(b).toString('base64url');
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function startTokenServer(opts: TokenServerOptions = {}): Promise<TokenServer> {
  const o: TokenServerOptions = {
    alg: 'RS256',
    service: 'sgz-registry',
    issuer: 'sgz-token-issuer',
    validForSec: 300,
    ...opts,
  };
  const alg = o.alg!;
  const signing = await makeSigningCert(alg);
  const key = createPrivateKey(signing.keyPem);
  const der = new X509Certificate(signing.certPem).raw;
  const requests: TokenRequestLog[] = [];
  const issued: string[] = [];

  const mint = (
    subject: string,
    access: Array<{ type: string; name: string; actions: string[] }>,
  ): string => {
    const now = Math.floor(Date.now() / 1000);
    const header = { typ: 'JWT', alg, x5c: [der.toString('base64')] };
    const claims = {
      iss: o.issuer,
      sub: subject,
      aud: o.service,
      exp: now + (o.validForSec ?? 300) - LEEWAY_SEC,
      nbf: now - 5,
      iat: now,
      jti: randomUUID(),
      access,
    };
    const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
    const sig =
      alg === 'RS256'
        ? sign('sha256', Buffer.from(input), key)
        : sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
    const token = `${input}.${b64url(sig)}`;
    issued.push(token);
    return token;
  };

  const grantFor = (user: string | undefined, scope: string | undefined) => {
    const access: Array<{ type: string; name: string; actions: string[] }> = [];
    for (const s of (scope ?? '').split(' ').filter(Boolean)) {
      const [type, name, actions] = s.split(':') as [string, string, string];
      if (type !== 'repository' || !name) continue;
      const wanted = (actions ?? '').split(',');
      const allowed = user ? wanted : o.anonymousPull ? wanted.filter((a) => a === 'pull') : [];
      if (allowed.length) access.push({ type, name, actions: allowed });
    }
    return access;
  };

  const server: Server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const log: TokenRequestLog = { method: req.method ?? '', status: 0 };
      const reply = (status: number, body: unknown) => {
        log.status = status;
        requests.push(log);
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (url.pathname !== '/token') return reply(404, { error: 'not found' });
      let user: string | undefined;
      let scope: string | undefined;
      if (req.method === 'POST') {
        const form = new URLSearchParams(await readBody(req));
        log.grant = form.get('grant_type') ?? undefined;
        scope = form.get('scope') ?? undefined;
        log.scope = scope;
        log.service = form.get('service') ?? undefined;
        if (o.noOAuth) return reply(404, { error: 'unsupported' });
        if (log.grant === 'password') {
          const u = form.get('username') ?? '';
          if (o.users?.[u] === undefined || o.users[u] !== form.get('password'))
            return reply(401, { error: 'invalid_grant' });
          user = u;
        } else if (log.grant === 'refresh_token') {
          const u = o.refreshTokens?.[form.get('refresh_token') ?? ''];
          if (!u) return reply(401, { error: 'invalid_grant' });
          user = u;
        } else {
          return reply(400, { error: 'unsupported_grant_type' });
        }
        const token = mint(user, grantFor(user, scope));
        return reply(200, {
          access_token: token,
          expires_in: o.advertisedExpiresIn ?? o.validForSec,
          scope,
          refresh_token: 'r-' + randomUUID(),
        });
      }
      if (req.method !== 'GET') return reply(405, { error: 'method' });
      scope = url.searchParams.getAll('scope').join(' ') || undefined;
      log.scope = scope;
      log.service = url.searchParams.get('service') ?? undefined;
      const auth = req.headers.authorization;
      if (auth?.startsWith('Basic ')) {
        const dec = Buffer.from(auth.slice(6), 'base64').toString('utf8');
        const i = dec.indexOf(':');
        const u = dec.slice(0, i);
        log.basicUser = u;
        if (o.users?.[u] === undefined || o.users[u] !== dec.slice(i + 1))
          return reply(401, { errors: [{ code: 'UNAUTHORIZED' }] });
        user = u;
      }
      const token = mint(user ?? '', grantFor(user, scope));
      return reply(200, {
        token,
        expires_in: o.advertisedExpiresIn ?? o.validForSec,
        issued_at: new Date().toISOString(),
      });
    })().catch(() => {
      res.destroy();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    realm: `http://127.0.0.1:${port}/token`,
    service: o.service!,
    issuer: o.issuer!,
    rootCertBundle: signing.cert,
    requests,
    issued,
    mint,
    setOptions(n) {
      Object.assign(o, n);
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await signing.cleanup();
    },
  };
}
