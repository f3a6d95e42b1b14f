import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChunkCache } from '../../src/cache/chunk-cache.js';
import { waitForMountLive } from '../../src/cli/serve-command.js';
import { RegistryClient } from '../../src/registry/index.js';
import {
  AccessLog,
  createLayerStore,
  mountStore,
  type AccessLine,
  type LayerStore,
  type StoreMount,
} from '../../src/store/index.js';
import { probe } from '../helpers/fuse.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { assembleImage, buildTestLayer, makeTar, pushImage, type BuiltImage } from '../helpers/store.js';

/**
 * `[debug] record_accesses`: a child process opens, re-opens and readlinks files of a layer's diff
 * through a real FUSE mount; the record file must name exactly those files, once each, with the
 * ALS directory digest they were opened under, and the bytes the kernel read from them.
 */

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(REPO, 'bin/stargz-store.js');
const b64 = (s: string) => Buffer.from(s).toString('base64');

const OS_RELEASE = 'ID=acctest\nVERSION_ID=1\n';
const TOOL = Buffer.alloc(300_000);
for (let i = 0; i < TOOL.length; i++) TOOL[i] = (i * 31 + (i >> 9)) & 0xff;

async function fixtureImage(): Promise<BuiltImage> {
  const tar = await makeTar([
    { name: 'etc/', type: 'directory' },
    { name: 'etc/os-release', content: OS_RELEASE },
    { name: 'bin/', type: 'directory' },
    { name: 'bin/tool', content: TOOL, mode: 0o755 },
    { name: 'bin/link', type: 'symlink', linkname: 'tool' },
    { name: 'unread.txt', content: 'stat only\n' },
    { name: 'usr/', type: 'directory' },
    { name: 'usr/never.txt', content: 'never touched\n' },
  ]);
  return assembleImage([await buildTestLayer(tar, 'estargz')]);
}

function parseLines(text: string): AccessLine[] {
  return text
    .trimEnd()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as AccessLine);
}

describe('access recording through a real FUSE mount', () => {
  let registry: TestRegistry;
  let dir: string;
  let img: BuiltImage;
  let REF: string;
  let TOC: string;
  let BLOB: string;

  beforeAll(async () => {
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'sgz-acc-'));
    img = await fixtureImage();
    await pushImage(registry.url, 'test/acc', 'esgz', img);
    REF = `${registry.host}/test/acc:esgz`;
    BLOB = img.layers[0]!.descriptor.digest;
    TOC = img.layers[0]!.tocDigest!;
    expect(TOC).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  afterAll(async () => {
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  describe('in-process store', () => {
    let cache: ChunkCache;
    let client: RegistryClient;
    let store: LayerStore;
    let mount: StoreMount | undefined;
    const file = () => join(dir, 'inproc.jsonl');

    beforeAll(async () => {
      const root = join(dir, 'root');
      cache = await ChunkCache.open({ root });
      client = new RegistryClient({ retry: { maxRetries: 0 }, requestTimeoutMs: 5000 });
      store = createLayerStore({
        root,
        registry: client,
        cache,
        deadlines: { lookupMs: 5000, readMs: 5000, syntheticMs: 1000 },
        // nothing but the child's own reads may reach the files
        layer: { backgroundFetch: false, prefetch: false },
        // batches never fill and the timer never fires: only store.close() can write the lines
        accessLog: await AccessLog.toFile(file(), { flushMs: 600_000 }),
      });
      mount = await mountStore(join(dir, 'mnt'), store, { allowOther: true });
    });

    afterAll(async () => {
      await mount?.unmount().catch(() => undefined);
      await store?.close();
      await client?.close();
      await cache?.close();
    });

    it('records each opened or readlinked file once, under the ALS digest used, with bytes read', async () => {
      const byBlob = join(dir, 'mnt', b64(REF), BLOB, 'diff');
      const byToc = join(dir, 'mnt', b64(REF), TOC, 'diff');
      const r = await probe([
        { op: 'read', path: join(byBlob, 'etc/os-release') },
        { op: 'read', path: join(byBlob, 'etc/os-release') },
        { op: 'read', path: join(byBlob, 'bin/tool'), offset: 100_000, length: 5000 },
        { op: 'readlink', path: join(byBlob, 'bin/link') },
        { op: 'readlink', path: join(byBlob, 'bin/link') },
        // follows the link (kernel) and opens bin/tool again: no new open line
        { op: 'read', path: join(byBlob, 'bin/link'), offset: 0, length: 10 },
        { op: 'stat', path: join(byBlob, 'unread.txt') },
        { op: 'readdir', path: join(byBlob, 'usr') },
        // the same layer under its NEW-client name is another ALS directory
        { op: 'read', path: join(byToc, 'etc/os-release') },
      ]);
      expect(Buffer.from((r[0] as { hex: string }).hex, 'hex').toString()).toBe(OS_RELEASE);
      expect(Buffer.from((r[2] as { hex: string }).hex, 'hex')).toEqual(TOOL.subarray(100_000, 105_000));
      expect(r[3]).toBe('tool');
      expect(Buffer.from((r[5] as { hex: string }).hex, 'hex')).toEqual(TOOL.subarray(0, 10));
      expect((r[6] as { size: number }).size).toBe(10);

      // unmount + close: releases arrive, then close() writes everything
      await mount!.unmount();
      mount = undefined;
      expect(await readFile(file(), 'utf8')).toBe('');
      await store.close();

      const lines = parseLines(await readFile(file(), 'utf8'));
      const firsts = lines
        .filter((l) => l.event === 'open' || l.event === 'readlink')
        .map((l) => {
          const { time, ...rest } = l as Extract<AccessLine, { event: 'open' | 'readlink' }>;
          expect(Number.isNaN(Date.parse(time))).toBe(false);
          return rest;
        });
      const base = { ref: REF, tocDigest: TOC };
      expect(firsts).toEqual([
        { event: 'open', ...base, digest: BLOB, path: 'etc/os-release', size: OS_RELEASE.length },
        { event: 'open', ...base, digest: BLOB, path: 'bin/tool', size: TOOL.length },
        { event: 'readlink', ...base, digest: BLOB, path: 'bin/link', size: 4 },
        { event: 'open', ...base, digest: TOC, path: 'etc/os-release', size: OS_RELEASE.length },
      ]);

      // last read line per file: distinct bytes the kernel asked for
      const bytes = new Map<string, number>();
      for (const l of lines) {
        if (l.event === 'read') bytes.set(`${l.digest} ${l.path}`, l.bytesRead);
      }
      expect(bytes.get(`${BLOB} etc/os-release`)).toBe(OS_RELEASE.length);
      expect(bytes.get(`${TOC} etc/os-release`)).toBe(OS_RELEASE.length);
      const tool = bytes.get(`${BLOB} bin/tool`)!;
      // at least the two ranges read (kernel pages and readahead may add more), never beyond the file
      expect(tool).toBeGreaterThanOrEqual(5000 + 10);
      expect(tool).toBeLessThanOrEqual(TOOL.length);
      expect([...bytes.keys()].sort()).toEqual(
        [`${BLOB} bin/tool`, `${BLOB} etc/os-release`, `${TOC} etc/os-release`].sort(),
      );
    });
  });

  describe('the stargz-store CLI', () => {
    beforeAll(() => {
      if (!existsSync(join(REPO, 'dist/src/cli/main.js'))) {
        throw new Error('dist/ is missing: run `npm run build` before the integration tests');
      }
    });

    it('--record-accesses wins over [debug] record_accesses; the file is complete after SIGTERM', async () => {
      const d = join(dir, 'cli');
      await mkdir(d, { recursive: true });
      const mnt = join(d, 'mnt');
      const fromFlag = join(d, 'from-flag.jsonl');
      const fromConfig = join(d, 'from-config.jsonl');
      const config = join(d, 'config.toml');
      await writeFile(
        config,
        `[registry]\nregistries_conf = ""\n[debug]\nrecord_accesses = "${fromConfig}"\n`,
      );
      const child = spawn(
        process.execPath,
        [
          CLI,
          '--record-accesses',
          fromFlag,
          '--config',
          config,
          '--root',
          join(d, 'root'),
          '--addr',
          join(d, 's.sock'),
          mnt,
        ],
        { cwd: REPO, stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let stderr = '';
      child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
      try {
        await waitForMountLive(mnt, 15_000);
        const diff = join(mnt, b64(REF), BLOB, 'diff');
        const r = await probe([
          { op: 'read', path: join(diff, 'etc/os-release') },
          { op: 'stat', path: join(diff, 'unread.txt') },
        ]);
        expect(Buffer.from((r[0] as { hex: string }).hex, 'hex').toString()).toBe(OS_RELEASE);
        child.kill('SIGTERM');
        // the store's own account of a failed stop, if any, is in the failure message
        const code = await exited;
        expect(code, `store exited ${code}; its stderr:\n${stderr}`).toBe(0);
      } finally {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGKILL');
          await exited;
        }
      }
      const lines = parseLines(await readFile(fromFlag, 'utf8'));
      expect(lines.filter((l) => l.event === 'open')).toEqual([
        expect.objectContaining({ ref: REF, digest: BLOB, tocDigest: TOC, path: 'etc/os-release' }),
      ]);
      expect(lines.find((l) => l.event === 'read')).toMatchObject({
        path: 'etc/os-release',
        bytesRead: OS_RELEASE.length,
      });
      expect(existsSync(fromConfig)).toBe(false);
      expect(stderr).toContain('recording file accesses');
    });
  });
});
