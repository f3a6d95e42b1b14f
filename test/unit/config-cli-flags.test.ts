import { describe, expect, it } from 'vitest';
import { normalizeGoStyleArgs } from '../../src/cli/serve-command.js';
import { authFilePaths, hostsFromStoreConfig } from '../../src/cli/config-options.js';
import { buildConfig } from '../../src/store/config/load.js';

describe('Go flag syntax', () => {
  it('turns single-dash store flags into commander long options and leaves everything else alone', () => {
    expect(
      normalizeGoStyleArgs([
        '-log-level=debug',
        '-config',
        '/etc/x.toml',
        '-root=/r',
        '-addr',
        '/s.sock',
        '/mnt',
      ]),
    ).toEqual(['--log-level=debug', '--config', '/etc/x.toml', '--root=/r', '--addr', '/s.sock', '/mnt']);
    expect(normalizeGoStyleArgs(['--root', '/r', '-h', '-x', '/mnt'])).toEqual([
      '--root',
      '/r',
      '-h',
      '-x',
      '/mnt',
    ]);
    // After `--` nothing is an option any more.
    expect(normalizeGoStyleArgs(['-root=/r', '--', '-root'])).toEqual(['--root=/r', '--', '-root']);
  });
});

describe('config -> registry client options', () => {
  it('maps [[resolver.host."h".mirrors]] with Go timeout semantics (0 = global, < 0 = none)', () => {
    const { config } = buildConfig(
      `[[resolver.host."docker.io".mirrors]]
host = "m1.example:5000"
insecure = true
header = { "x-a" = "1" }
[[resolver.host."docker.io".mirrors]]
host = "m2.example"
request_timeout_sec = -1
[[resolver.host."ghcr.io".mirrors]]
host = "m3.example"
request_timeout_sec = 7
`,
      { mountpoint: '/mnt' },
    );
    expect(hostsFromStoreConfig(config)).toEqual({
      'docker.io': {
        mirrors: [
          { host: 'm1.example:5000', insecure: true, headers: { 'x-a': ['1'] } },
          { host: 'm2.example', insecure: false, requestTimeoutMs: Infinity },
        ],
      },
      'ghcr.io': { mirrors: [{ host: 'm3.example', insecure: false, requestTimeoutMs: 7000 }] },
    });
  });

  it('[resolver] TLS files (host and mirrors) reach the registry client; bad ones name the key', () => {
    const { config, warnings } = buildConfig(
      `[resolver]
request_timeout_sec = 20
[resolver.host."ghcr.io"]
ca_file = "/etc/ssl/ghcr.pem"
[resolver.host."reg.lan:5000"]
ca_file = ["/etc/ssl/a.pem", "/etc/ssl/b.pem"]
cert_file = "/etc/ssl/client.pem"
key_file = "/etc/ssl/client.key"
[[resolver.host."docker.io".mirrors]]
host = "mirror.lan:5000"
ca_file = "/etc/ssl/mirror.pem"
`,
      { mountpoint: '/mnt' },
    );
    expect(warnings).toEqual([]);
    expect(config.resolver.requestTimeoutSec).toBe(20);
    expect(hostsFromStoreConfig(config)).toEqual({
      'ghcr.io': { mirrors: [], caFiles: ['/etc/ssl/ghcr.pem'] },
      'reg.lan:5000': {
        mirrors: [],
        caFiles: ['/etc/ssl/a.pem', '/etc/ssl/b.pem'],
        certFile: '/etc/ssl/client.pem',
        keyFile: '/etc/ssl/client.key',
      },
      'docker.io': {
        mirrors: [{ host: 'mirror.lan:5000', insecure: false, caFiles: ['/etc/ssl/mirror.pem'] }],
      },
    });
    const bad = (text: string) => {
      try {
        buildConfig(text, { mountpoint: '/mnt' });
      } catch (err) {
        return (err as Error).message;
      }
      return 'no error';
    };
    expect(bad('[resolver.host."a"]\nca_file = "relative.pem"\n')).toMatch(
      /^config key \[resolver\.host\."a"\] ca_file: must be an absolute path/,
    );
    expect(bad('[resolver.host."a"]\ncert_file = "/c.pem"\n')).toMatch(
      /^config key \[resolver\.host\."a"\] key_file: needs both cert_file and key_file/,
    );
    expect(bad('[[resolver.host."a".mirrors]]\nhost = "m"\nca_file = []\n')).toMatch(
      /^config key \[\[resolver\.host\."a"\.mirrors\]\]#1 ca_file: /,
    );
  });

  it('[registry] auth_file and docker_config take the place of the default auth files', () => {
    const env = { HOME: '/home/u', XDG_RUNTIME_DIR: '/run/user/7' };
    const { config: plain } = buildConfig(undefined, { mountpoint: '/mnt' });
    const defaults = authFilePaths(plain, env);
    expect(defaults).toContain('/home/u/.docker/config.json');
    expect(defaults).toContain('/run/user/7/containers/auth.json');

    const { config } = buildConfig(
      '[registry]\nauth_file = "/etc/auth.json"\ndocker_config = "/etc/docker.json"\n',
      {
        mountpoint: '/mnt',
      },
    );
    const paths = authFilePaths(config, env);
    expect(paths[0]).toBe('/etc/auth.json');
    expect(paths).toContain('/etc/docker.json');
    expect(paths).not.toContain('/home/u/.docker/config.json');
  });
});
