import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { runDoctor } from '../../src/cli/doctor-command.js';
import { startCliStore, TS_CLI, type CliStore } from '../helpers/cli-store.js';
import { probeOne, runChild } from '../helpers/fuse.js';
import { assembleImage, encodeLayer, makeTar, pushImageHttp, sha256 } from '../helpers/oci-image.js';
import { freePort, startRegistry, type TestRegistry } from '../helpers/registry.js';
import { expectNoSecrets } from '../helpers/secrets.js';
import { doctorArgs, serveArgs } from '../helpers/serve-cli.js';
import { startTokenServer, type TokenServer } from '../helpers/token-server.js';

/**
 * Issue 14, secrets: the real store process pulls lazily from a basic-auth registry and a
 * bearer-token registry (credentials from an auth.json). No password, `user:password` pair or
 * token may appear in `status` (table, --no-trunc, --json), `doctor` (text and --json, with good
 * and with wrong credentials), the /metrics text, or the store's own log at trace level.
 */

const BASIC_USER = 'basicuser';
const BASIC_PASS = 'basic-Pw-Secret-60613';
const TOKEN_USER = 'tokenuser';
const TOKEN_PASS = 'token-Pw-Secret-90127';
const WRONG_PASS = 'wrong-Pw-Secret-44021';

const authEntry = (user: string, pass: string) => ({
  auth: Buffer.from(`${user}:${pass}`).toString('base64'),
});

/** `stargz-store <args>` from the TypeScript sources (no dist/ needed). */
async function cli(args: string[]): Promise<{ code: number | null; out: string }> {
  const r = await runChild(process.execPath, [...TS_CLI, ...args], '', 60_000);
  return { code: r.code, out: r.stdout + r.stderr };
}

describe('no credential or token in status, doctor, metrics or the log', () => {
  let tokens: TokenServer;
  let basicReg: TestRegistry;
  let tokenReg: TestRegistry;
  let dir: string;
  let mnt: string;
  let sock: string;
  let root: string;
  let config: string;
  let wrongConfig: string;
  let storageConf: string;
  let metricsAddr: string;
  let store: CliStore | undefined;
  const refs: Array<{ ref: string; digest: string; content: Buffer }> = [];

  const secrets = () => [BASIC_PASS, TOKEN_PASS, WRONG_PASS, ...tokens.issued];
  const users = [BASIC_USER, TOKEN_USER];

  beforeAll(async () => {
    const { stdout: htpasswd } = await promisify(execFile)('/usr/bin/htpasswd', [
      '-nbB',
      BASIC_USER,
      BASIC_PASS,
    ]);
    basicReg = await startRegistry({ htpasswd: htpasswd.trim() + '\n' });
    tokens = await startTokenServer({ users: { [TOKEN_USER]: TOKEN_PASS }, anonymousPull: false });
    tokenReg = await startRegistry({
      token: {
        realm: tokens.realm,
        service: tokens.service,
        issuer: tokens.issuer,
        rootCertBundlePath: tokens.rootCertBundle,
      },
    });
    const pushes: Array<[TestRegistry, string]> = [
      [basicReg, `Basic ${Buffer.from(`${BASIC_USER}:${BASIC_PASS}`).toString('base64')}`],
      [
        tokenReg,
        `Bearer ${tokens.mint('setup', [{ type: 'repository', name: 'private/app', actions: ['pull', 'push'] }])}`,
      ],
    ];
    for (const [reg, authorization] of pushes) {
      const content = randomBytes(200_000);
      const layer = await encodeLayer(await makeTar([{ path: 'data/f.bin', content }]), 'estargz', {
        chunkSize: 64 << 10,
      });
      const ref = await pushImageHttp(reg.host, 'private/app', 'v1', assembleImage([layer]), authorization);
      refs.push({ ref, digest: layer.descriptor.digest, content });
    }

    dir = await mkdtemp(join(tmpdir(), 'sgz-secrets-'));
    mnt = join(dir, 'mnt');
    sock = join(dir, 'store.sock');
    root = join(dir, 'root');
    await mkdir(mnt);
    const auth = join(dir, 'auth.json');
    await writeFile(
      auth,
      JSON.stringify({
        auths: {
          [basicReg.host]: authEntry(BASIC_USER, BASIC_PASS),
          [tokenReg.host]: authEntry(TOKEN_USER, TOKEN_PASS),
        },
      }),
      { mode: 0o600 },
    );
    const wrongAuth = join(dir, 'wrong-auth.json');
    await writeFile(
      wrongAuth,
      JSON.stringify({ auths: { [basicReg.host]: authEntry(BASIC_USER, WRONG_PASS) } }),
      {
        mode: 0o600,
      },
    );
    storageConf = join(dir, 'storage.conf');
    await writeFile(
      storageConf,
      `[storage]\ndriver = "overlay"\n[storage.options]\nadditionallayerstores = ["${mnt}:ref"]\n`,
    );
    config = join(dir, 'config.toml');
    wrongConfig = join(dir, 'wrong.toml');
    const cache = '[cache]\nmin_free_bytes = 0\n';
    await writeFile(config, `${cache}[registry]\nauth_file = "${auth}"\n`);
    await writeFile(wrongConfig, `${cache}[registry]\nauth_file = "${wrongAuth}"\n`);

    metricsAddr = `127.0.0.1:${await freePort()}`;
    store = await startCliStore(
      [
        ...TS_CLI,
        ...serveArgs({ config, root, addr: sock }),
        '--log-level',
        'trace',
        '--log-format',
        'json',
        '--metrics-address',
        metricsAddr,
        mnt,
      ],
      sock,
    );
  }, 120_000);

  afterAll(async () => {
    if (store && store.child.exitCode === null) {
      store.child.kill('SIGTERM');
      await store.exited;
    }
    await basicReg?.stop();
    await tokenReg?.stop();
    await tokens?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('reads both private layers lazily through the mount (so every output has real content)', async () => {
    for (const r of refs) {
      const file = join(mnt, Buffer.from(r.ref).toString('base64'), r.digest, 'diff', 'data', 'f.bin');
      const got = await probeOne<{ sha256: string; length: number }>({ op: 'sha256', path: file });
      expect(got).toEqual({ sha256: sha256(r.content), length: r.content.length });
    }
    // the token registry really handed out tokens to the store
    expect(tokens.issued.length).toBeGreaterThan(1);
  });

  it('status: table, --no-trunc and --json', async () => {
    for (const flags of [[], ['--no-trunc'], ['--json']]) {
      const r = await cli(['status', '--addr', sock, ...flags]);
      expect(r.code, r.out).toBe(0);
      if (flags.includes('--json')) for (const x of refs) expect(r.out).toContain(x.ref);
      expectNoSecrets(r.out, secrets(), { users, where: `status ${flags.join(' ')} line` });
    }
  });

  it('doctor: text and --json, good and wrong credentials', async () => {
    const outputs: string[] = [];
    for (const json of [false, true]) {
      for (const r of refs) {
        const d = await runDoctor({
          mountpoint: mnt,
          addr: sock,
          root,
          config,
          storageConf,
          ref: r.ref,
          json,
        });
        outputs.push(d.output);
        expect(d.code, d.output).toBe(0);
        expect(d.output).toContain('private/app');
      }
      const bad = await runDoctor({
        mountpoint: mnt,
        addr: sock,
        root,
        config: wrongConfig,
        storageConf,
        ref: refs[0]!.ref,
        json,
      });
      // the wrong password is refused, and the doctor says so
      expect(bad.code).toBe(1);
      expect(bad.output).toMatch(/UNAUTHORIZED/);
      outputs.push(bad.output);
    }
    // the CLI itself (what a user runs)
    const c = await cli(
      doctorArgs({ mountpoint: mnt, addr: sock, root, config, storageConf, ref: refs[1]!.ref }),
    );
    expect(c.code, c.out).toBe(0);
    outputs.push(c.out);
    for (const [i, o] of outputs.entries())
      expectNoSecrets(o, secrets(), { users, where: `doctor output #${i} line` });
  });

  it('the /metrics text', async () => {
    const text = await fetch(`http://${metricsAddr}/metrics`).then((r) => r.text());
    // the store talked to both registries: the registry series are there to be checked
    expect(text).toContain(basicReg.host);
    expect(text).toContain(tokenReg.host);
    expectNoSecrets(text, secrets(), { users, where: 'metrics line' });
  });

  it("the store's own log, at trace level", () => {
    const log = store!.output();
    expect(log).not.toBe('');
    expectNoSecrets(log, secrets(), { users, where: 'store log line' });
  });
});
