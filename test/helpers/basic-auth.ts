import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * The registry's Basic auth check for test servers: true when `req` carries `auth`'s credentials,
 * else answers 401 with a Basic challenge for `realm` (and the caller stops).
 */
export function passesBasicAuth(
  req: IncomingMessage,
  res: ServerResponse,
  auth: { user: string; pass: string },
  realm: string,
): boolean {
  const want = `Basic ${Buffer.from(`${auth.user}:${auth.pass}`).toString('base64')}`;
  if (req.headers.authorization === want) return true;
  res.writeHead(401, { 'www-authenticate': `Basic realm="${realm}"`, 'content-type': 'application/json' });
  res.end('{"errors":[{"code":"UNAUTHORIZED"}]}');
  return false;
}
