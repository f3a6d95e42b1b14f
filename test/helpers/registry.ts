import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, writeFile, rm } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A real docker-registry (distribution 2.8, Debian package) on 127.0.0.1, started per test suite. */
export interface TestRegistry {
  /** host:port, e.g. 127.0.0.1:41234 */
  host: string;
  url: string;
  dir: string;
  /** Access log lines (stderr of the registry), for counting requests/bytes. */
  log: string[];
  stop(): Promise<void>;
}

export interface RegistryOptions {
  /** htpasswd file contents (bcrypt) to enable basic auth. */
  htpasswd?: string;
  /** Token auth: realm URL, service and a PEM certificate bundle that signs tokens. */
  token?: { realm: string; service: string; issuer: string; rootCertBundlePath: string };
  /** TLS: paths to server certificate and key; `clientCas` makes client certificates mandatory. */
  tls?: { certificate: string; key: string; clientCas?: string[] };
  /** Pull-through cache (Distribution proxy mode) of this upstream URL. */
  proxyRemoteUrl?: string;
}

export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });
}

export async function startRegistry(opts: RegistryOptions = {}): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), 'sgz-registry-'));
  const port = await freePort();
  const lines = [
    'version: 0.1',
    'log:',
    '  level: info',
    '  accesslog:',
    '    disabled: false',
    'storage:',
    '  filesystem:',
    `    rootdirectory: ${dir}/data`,
    '  delete:',
    '    enabled: true',
    'http:',
    `  addr: 127.0.0.1:${port}`,
  ];
  if (opts.tls) {
    lines.push('  tls:', `    certificate: ${opts.tls.certificate}`, `    key: ${opts.tls.key}`);
    if (opts.tls.clientCas?.length) {
      lines.push('    clientcas:', ...opts.tls.clientCas.map((c) => `      - ${c}`));
    }
  }
  if (opts.htpasswd !== undefined) {
    await writeFile(join(dir, 'htpasswd'), opts.htpasswd);
    lines.push('auth:', '  htpasswd:', '    realm: test-realm', `    path: ${dir}/htpasswd`);
  } else if (opts.token) {
    lines.push(
      'auth:',
      '  token:',
      `    realm: ${opts.token.realm}`,
      `    service: ${opts.token.service}`,
      `    issuer: ${opts.token.issuer}`,
      `    rootcertbundle: ${opts.token.rootCertBundlePath}`,
    );
  }
  if (opts.proxyRemoteUrl) lines.push('proxy:', `  remoteurl: ${opts.proxyRemoteUrl}`);
  await writeFile(join(dir, 'config.yml'), lines.join('\n') + '\n');
  const child: ChildProcess = spawn('/usr/bin/docker-registry', ['serve', join(dir, 'config.yml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const log: string[] = [];
  const onData = (b: Buffer) => {
    for (const l of b.toString().split('\n')) if (l) log.push(l);
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const scheme = opts.tls ? 'https' : 'http';
  const host = `127.0.0.1:${port}`;
  const deadline = Date.now() + 15_000;
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  // Wait until the port accepts connections.
  while (true) {
    if (exited) throw new Error(`docker-registry exited during start-up:\n${log.join('\n')}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`docker-registry did not start:\n${log.join('\n')}`);
    }
    const up = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (up) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    host,
    url: `${scheme}://${host}`,
    dir,
    log,
    async stop() {
      if (!exited) {
        const done = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await Promise.race([done, new Promise((r) => setTimeout(r, 5000))]);
        if (!exited) child.kill('SIGKILL');
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
