import { describe, expect, it } from 'vitest';
import { authFilePaths, hostsFromStoreConfig, normalizeGoStyleArgs } from '../../src/cli/serve-command.js';
import { buildConfig } from '../../src/store/config.js';

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
