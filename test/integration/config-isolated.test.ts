import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, type ConfigFlags, type LoadedConfig } from '../../src/store/config/load.js';
import { runChild } from '../helpers/fuse.js';
import { BIN_CLI, startServeCli, type ServeCli } from '../helpers/serve-cli.js';

const REPO = resolve(import.meta.dirname, '../..');

/**
 * The daemon reads its config in a child process (src/store/config/load-isolated.ts) so that the
 * schema library never enters its memory: the answer must be the in-process one, errors included,
 * and the serving process must really load no zod.
 */
describe('config loaded in a child process (built CLI)', () => {
  let dir: string;
  let isolated: (flags: ConfigFlags) => Promise<LoadedConfig>;
  let store: ServeCli | undefined;

  beforeAll(async () => {
    const built = join(REPO, 'dist/src/store/config/load-isolated.js');
    if (!existsSync(built))
      throw new Error('dist/ is missing: run `npm run build` before the integration tests');
    ({ loadConfigIsolated: isolated } = (await import(pathToFileURL(built).href)) as {
      loadConfigIsolated: typeof isolated;
    });
    dir = await mkdtemp(join(tmpdir(), 'sgz-config-isolated-'));
  });

  afterAll(async () => {
    await store?.stop();
    await runChild('fusermount', ['-uz', join(dir, 'mnt')]);
    await rm(dir, { recursive: true, force: true });
  });

  const both = async (name: string, text: string | undefined, flags: ConfigFlags = {}) => {
    const path = join(dir, name);
    if (text !== undefined) await writeFile(path, text);
    const f = {
      config: path,
      root: join(dir, 'root'),
      addr: join(dir, 's.sock'),
      mountpoint: '/m',
      ...flags,
    };
    const settle = (p: Promise<LoadedConfig>) =>
      p.then(
        (v) => ({ ok: true as const, v }),
        (e: { code?: string; message?: string; name?: string }) => ({
          ok: false as const,
          e: { name: e.name, code: e.code, message: e.message },
        }),
      );
    return { isolated: await settle(isolated(f)), inProcess: await settle(loadConfig(f)) };
  };

  it('answers what loadConfig answers in process, tables, mirrors, warnings and overrides included', async () => {
    const text = [
      'metrics_address = "127.0.0.1:9100"',
      'unknown_top = 1',
      '[cache]',
      'min_free_bytes = 0',
      '[background]',
      'concurrency = 1',
      '[resolver.host."registry.example"]',
      '[[resolver.host."registry.example".mirrors]]',
      'host = "mirror.example:5000"',
      'insecure = true',
      '',
    ].join('\n');
    const { isolated: child, inProcess } = await both('full.toml', text, { set: ['blob.chunk_size=100000'] });
    expect(inProcess.ok).toBe(true);
    expect(child).toEqual(inProcess);
    if (!child.ok) return;
    expect(child.v.warnings.join('\n')).toContain('unknown_top');
    expect(child.v.config.metricsAddress).toBe('127.0.0.1:9100');
  });

  it('rejects a bad value, a bad file and a missing file with the in-process StoreError', async () => {
    for (const [name, text] of [
      ['bad-value.toml', '[cache]\nmin_free_bytes = "lots"\n'],
      ['bad-toml.toml', '[cache\n'],
      ['missing.toml', undefined],
    ] as const) {
      const { isolated: child, inProcess } = await both(name, text);
      expect(inProcess.ok, name).toBe(false);
      expect(child, name).toEqual(inProcess);
      if (!child.ok) expect(child.e).toMatchObject({ name: 'StoreError', code: 'E_CONFIG' });
    }
  });

  it('keeps zod out of the serving process: only the config reader loads it', async () => {
    const mnt = join(dir, 'mnt');
    await mkdir(mnt, { recursive: true });
    const config = join(dir, 'serve.toml');
    await writeFile(config, '[cache]\nmin_free_bytes = 0\n');
    const seen = join(dir, 'seen');
    // every process (the store and the child it forks inherit --import) records the modules it
    // resolves, in <seen>.<pid>, written at its exit (no file I/O while it serves)
    const recorder = join(dir, 'record-modules.mjs');
    await writeFile(
      recorder,
      [
        "import { registerHooks } from 'node:module';",
        "import { writeFileSync } from 'node:fs';",
        'const urls = [];',
        'registerHooks({ resolve(s, c, next) { const r = next(s, c); urls.push(r.url); return r; } });',
        `process.on('exit', () => writeFileSync(${JSON.stringify(seen)} + '.' + process.pid, urls.join('\\n')));`,
        '',
      ].join('\n'),
    );
    store = await startServeCli({
      cli: ['--import', recorder, ...BIN_CLI],
      config,
      root: join(dir, 'serve-root'),
      addr: join(dir, 'serve.sock'),
      mountpoint: mnt,
      notifySocket: join(dir, 'notify.sock'),
    });
    // a layer lookup (no registry answers on port 1): the registry, layer and FUSE modules the
    // first requests load are in the list too
    const ref = Buffer.from('127.0.0.1:1/none/image:v1').toString('base64');
    const lookup = await runChild('stat', [join(mnt, ref, `sha256:${'0'.repeat(64)}`, 'diff')]);
    expect(lookup.code).not.toBe(0);
    expect(lookup.stderr).toMatch(/No such file|Input\/output error/);
    const pid = store.child.pid;
    expect(await store.stop()).toEqual({ code: 0, signal: null });
    const modules = async (n: string) => (await readFile(join(dir, n), 'utf8')).split('\n');
    const others = (await readdir(dir)).filter((n) => n.startsWith('seen.') && n !== `seen.${pid}`);
    const zod = (urls: string[]) => urls.filter((u) => u.includes('/node_modules/zod/'));
    const main = await modules(`seen.${pid}`);
    expect(main.some((u) => u.includes('/dist/src/fs/'))).toBe(true);
    expect(zod(main)).toEqual([]);
    // the config reader did validate with it
    const children = await Promise.all(others.map(modules));
    expect(children.filter((urls) => zod(urls).length > 0)).toHaveLength(1);
  });
});
