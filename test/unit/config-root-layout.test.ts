import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BlobStore } from '../../src/cache/blob-store.js';
import { CachePaths } from '../../src/cache/paths.js';
import { buildConfig } from '../../src/store/config/load.js';
import { DEFAULT_CONTROL_SOCKET as SOCKET_FROM_CONTROL } from '../../src/store/control-socket.js';
import { pinsFile } from '../../src/store/pins.js';
import { DEFAULT_CONTROL_SOCKET, DEFAULT_ROOT, rootLayout } from '../../src/util/root-layout.js';

describe('the --root layout has one owner (util/root-layout.ts)', () => {
  it('every state path under --root', () => {
    const l = rootLayout('/r');
    expect(l).toEqual({
      root: '/r',
      cache: '/r/cache',
      chunks: '/r/cache/chunks/sha256',
      cacheTmp: '/r/cache/tmp',
      metadataLayers: '/r/metadata/layers',
      metadataTocs: '/r/metadata/tocs',
      layerState: '/r/layer-state',
      blobs: '/r/blobs/sha256',
      pins: '/r/pins.json',
      instanceLock: '/r/stargz-store.lock',
      rehearsal: '/r/rehearsal',
    });
  });

  it('the modules that write state use it', async () => {
    const root = await mkdtemp(join(tmpdir(), 'layout-'));
    try {
      const l = rootLayout(root);
      const c = new CachePaths(root);
      expect([c.base, c.chunks, c.tmp]).toEqual([l.cache, l.chunks, l.cacheTmp]);
      expect(pinsFile(root)).toBe(l.pins);
      const blobs = await BlobStore.open({ root, durable: false });
      expect(blobs.dir).toBe(l.blobs);
      await blobs.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('defaults of --root and --addr come from it', () => {
    const { config } = buildConfig(undefined, { mountpoint: '/m' });
    expect(config.root).toBe(DEFAULT_ROOT);
    expect(config.addr).toBe(DEFAULT_CONTROL_SOCKET);
    expect(SOCKET_FROM_CONTROL).toBe(DEFAULT_CONTROL_SOCKET);
  });

  it('docs/architecture.md "State on disk" names every path of the layout', async () => {
    const doc = await readFile(new URL('../../docs/architecture.md', import.meta.url), 'utf8');
    const section = doc.slice(
      doc.indexOf('## State on disk'),
      doc.indexOf('\n## ', doc.indexOf('## State on disk') + 1),
    );
    const l = rootLayout('/r');
    for (const [name, path] of Object.entries(l)) {
      if (name === 'root') continue;
      const rel = relative('/r', path);
      // directories are written with a trailing slash or followed by more path (`cache/chunks/sha256/ab/<hex>`)
      expect(section, rel).toMatch(new RegExp('`' + rel.replace(/[.]/g, '\\.') + '[/`]'));
    }
  });
});

describe('defaults shared with lower layers', () => {
  it('max_toc_entries defaults to the format reader own cap', async () => {
    const { DEFAULT_MAX_ENTRIES } = await import('../../src/format/open-layer.js');
    expect(buildConfig(undefined, { mountpoint: '/m' }).config.maxTocEntries).toBe(DEFAULT_MAX_ENTRIES);
  });

  it('the background quiet period and the memory LRU default to the config defaults', async () => {
    const { FetchScheduler } = await import('../../src/layer/scheduler.js');
    const { config } = buildConfig(undefined, { mountpoint: '/m' });
    expect(new FetchScheduler({}).quietMs).toBe(config.background.quietMs);
    const { ChunkCache } = await import('../../src/cache/chunk-cache.js');
    const root = await mkdtemp(join(tmpdir(), 'defaults-'));
    try {
      const cache = await ChunkCache.open({ root });
      expect(cache.memoryLimit).toBe(config.cache.memoryBytes);
      await cache.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
