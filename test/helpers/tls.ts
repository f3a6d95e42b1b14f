import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

async function openssl(args: string[], cwd: string): Promise<void> {
  try {
    await run('/usr/bin/openssl', args, { cwd });
  } catch (err) {
    // no silent skip: a missing openssl must fail the suite
    throw new Error(`openssl ${args[0]} failed: ${(err as Error).message}`);
  }
}

export interface TestPki {
  dir: string;
  caCert: string;
  caKey: string;
  /** server certificate for 127.0.0.1 / localhost, signed by the CA */
  serverCert: string;
  serverKey: string;
  /** client certificate for mutual TLS, signed by the CA */
  clientCert: string;
  clientKey: string;
  /** PEM text of the CA certificate */
  caPem: string;
  cleanup(): Promise<void>;
}

/** A throw-away CA with a loopback server certificate and a client certificate (openssl CLI). */
export async function makeTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), 'sgz-pki-'));
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await openssl(
    [
      'req',
      '-x509',
      ...ec,
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-days',
      '2',
      '-subj',
      '/CN=sgz test CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  await writeFile(
    join(dir, 'server.ext'),
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n',
  );
  await writeFile(join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n');
  for (const who of ['server', 'client']) {
    await openssl(
      ['req', ...ec, '-keyout', `${who}.key`, '-out', `${who}.csr`, '-subj', `/CN=sgz test ${who}`],
      dir,
    );
    await openssl(
      [
        'x509',
        '-req',
        '-in',
        `${who}.csr`,
        '-CA',
        'ca.crt',
        '-CAkey',
        'ca.key',
        '-CAcreateserial',
        '-out',
        `${who}.crt`,
        '-days',
        '2',
        '-extfile',
        `${who}.ext`,
      ],
      dir,
    );
  }
  return {
    dir,
    caCert: join(dir, 'ca.crt'),
    caKey: join(dir, 'ca.key'),
    serverCert: join(dir, 'server.crt'),
    serverKey: join(dir, 'server.key'),
    clientCert: join(dir, 'client.crt'),
    clientKey: join(dir, 'client.key'),
    caPem: await readFile(join(dir, 'ca.crt'), 'utf8'),
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}

/** A self-signed certificate + key for signing JWTs (docker-registry's `rootcertbundle`). */
export async function makeSigningCert(
  alg: 'RS256' | 'ES256',
): Promise<{ dir: string; cert: string; keyPem: string; certPem: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'sgz-jwt-'));
  const key =
    alg === 'RS256' ? ['-newkey', 'rsa:2048'] : ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1'];
  await openssl(
    [
      'req',
      '-x509',
      ...key,
      '-nodes',
      '-keyout',
      'sign.key',
      '-out',
      'sign.crt',
      '-days',
      '2',
      '-subj',
      '/CN=sgz token signer',
    ],
    dir,
  );
  return {
    dir,
    cert: join(dir, 'sign.crt'),
    keyPem: await readFile(join(dir, 'sign.key'), 'utf8'),
    certPem: await readFile(join(dir, 'sign.crt'), 'utf8'),
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}
