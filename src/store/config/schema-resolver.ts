import { isAbsolute } from 'node:path';
import { z } from 'zod';
import { bool, documented, entry, int, issue, oneOf } from './fields.js';

/**
 * The `[resolver.host."h"]` tables of config.toml: mirrors and TLS files per registry host (Go
 * keys, plus our TLS files). Declared here, assembled into the file schema in schema.ts.
 */

/**
 * `ca_file` (a path or an array of paths), `cert_file`, `key_file`: absolute PEM paths. The Go
 * store has no TLS keys; ours are accepted on a `[resolver.host."h"]` table and on each mirror.
 */
const absPath = z
  .string({ error: 'must be an absolute path' })
  .refine((v) => isAbsolute(v), { error: 'must be an absolute path' });

const tlsShape = {
  ca_file: documented(
    z
      .union([absPath, z.array(absPath).min(1)], { error: 'must be a path or a non-empty array of paths' })
      .optional(),
    { doc: 'extra CA certificate(s) (PEM) added to the system roots', kind: 'path or array of paths' },
  ),
  cert_file: documented(absPath.optional(), {
    doc: 'client certificate (PEM) for mutual TLS; needs key_file',
    kind: 'path',
  }),
  key_file: documented(absPath.optional(), {
    doc: 'client key (PEM) for mutual TLS; needs cert_file',
    kind: 'path',
  }),
};

/** CA certificates added to the system roots, and a client certificate + key for mutual TLS. */
export interface TlsFiles {
  caFiles?: string[];
  certFile?: string;
  keyFile?: string;
}

type TlsInput = { ca_file?: string | string[]; cert_file?: string; key_file?: string };

function checkTlsPair(t: TlsInput, ctx: z.RefinementCtx): void {
  if ((t.cert_file === undefined) !== (t.key_file === undefined)) {
    const missing = t.cert_file === undefined ? 'cert_file' : 'key_file';
    issue(ctx, 'needs both cert_file and key_file', t.cert_file ?? t.key_file, [missing]);
  }
}

function tlsOf(t: TlsInput): { tls?: TlsFiles } {
  const tls: TlsFiles = {};
  if (t.ca_file !== undefined) tls.caFiles = Array.isArray(t.ca_file) ? t.ca_file : [t.ca_file];
  if (t.cert_file !== undefined) tls.certFile = t.cert_file;
  if (t.key_file !== undefined) tls.keyFile = t.key_file;
  return Object.keys(tls).length > 0 ? { tls } : {};
}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const headerValues = 'must be a string or an array of strings without line breaks';

const mirror = entry({
  host: documented(
    z
      .string({ error: 'must be a string' })
      .prefault('')
      .superRefine((h, ctx) => {
        if (h === '' || /\s|\/\//.test(h))
          issue(ctx, 'must be a host[:port] without scheme (use insecure = true for plain http)', h);
      }),
    { doc: 'host[:port] of the mirror, no scheme (required)', defaultDoc: '(required)', kind: 'string' },
  ),
  insecure: bool(false, 'plain HTTP (and no TLS verification) for this mirror'),
  request_timeout_sec: int(0, '0 = [resolver] request_timeout_sec; < 0 = no timeout', {
    min: Number.MIN_SAFE_INTEGER,
    what: 'must be an integer',
  }),
  header: documented(
    z
      .record(
        z.string(),
        z.union([z.string(), z.array(z.string()).min(1)], { error: headerValues }).superRefine((v, ctx) => {
          if ((Array.isArray(v) ? v : [v]).some((x) => /[\r\n\0]/.test(x))) issue(ctx, headerValues, v);
        }),
        { error: 'must be a table of header = "value" or ["values"]' },
      )
      .superRefine((h, ctx) => {
        for (const name of Object.keys(h))
          if (!HEADER_NAME.test(name)) issue(ctx, 'is not a valid header name', name, [name]);
      })
      .transform((h) =>
        Object.fromEntries(Object.entries(h).map(([k, v]) => [k, Array.isArray(v) ? v : [v]])),
      )
      .default({}),
    {
      doc: 'extra request headers, e.g. { "X-Dragonfly-Registry" = ["https://index.docker.io"] }',
      kind: 'table',
    },
  ),
  ranged_reads: oneOf(['mirror', 'split', 'next-host'], 'mirror', 'how range reads use this mirror'),
  ns_query: bool(true, 'send ?ns=<registry> to this mirror'),
  ...tlsShape,
})
  .superRefine(checkTlsPair)
  .transform((m) => {
    const out: MirrorConfig = {
      host: m.host,
      insecure: m.insecure,
      requestTimeoutSec: m.request_timeout_sec,
      header: m.header,
      ...tlsOf(m),
    };
    // only when not the default, so configs without the keys read as before
    if (m.ranged_reads !== 'mirror') out.rangedReads = m.ranged_reads;
    if (!m.ns_query) out.nsQuery = false;
    return out;
  });

export interface MirrorConfig {
  /** host[:port] (no scheme). */
  host: string;
  /** Plain HTTP (and no TLS verification) for this mirror. */
  insecure: boolean;
  /** 0 = [resolver] request_timeout_sec; < 0 = no timeout (Go semantics). */
  requestTimeoutSec: number;
  /** Extra request headers. */
  header: Record<string, string[]>;
  tls?: TlsFiles;
  /** `ranged_reads = "split" | "next-host"` (absent: "mirror", the default); see registry/hosts.ts. */
  rangedReads?: 'split' | 'next-host';
  /** `ns_query = false`: no `?ns=<registry>` for this mirror (absent: sent). */
  nsQuery?: false;
}

export const hostEntry = entry({
  mirrors: z.array(mirror, { error: 'must be an array of tables ([[...mirrors]])' }).default([]),
  ...tlsShape,
})
  .superRefine(checkTlsPair)
  .transform((h) => ({ mirrors: h.mirrors, ...tlsOf(h) }));
