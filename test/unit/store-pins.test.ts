import { describe, expect, it } from 'vitest';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PinManager, pinsFile, type HeldLayer, type PinManagerDeps } from '../../src/store/pins.js';
import { formatPinList, parsePinFile } from '../../src/cli/pin-command.js';

/** A layer whose background pass ends when the test says so. */
function fakeLayer(verified: boolean, lastError?: string) {
  let finish!: () => void;
  const done = new Promise<void>((r) => (finish = r));
  let released = 0;
  const held: HeldLayer = {
    state: () => ({
      bytesFetched: 10,
      totalBytes: 10,
      percent: verified ? 100 : 40,
      fullyVerified: verified,
      ...(lastError !== undefined ? { lastError } : {}),
    }),
    whenDone: () => done,
    release: () => released++,
  };
  return { held, finish, released: () => released };
}

async function withRoot<T>(fn: (root: string) => Promise<T>): Promise<T> {
  const root = await mkdtemp(join(tmpdir(), 'sgz-pins-unit-'));
  try {
    return await fn(root);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

function deps(root: string, layers: Map<string, ReturnType<typeof fakeLayer>>, free = 1e12): PinManagerDeps {
  return {
    root,
    resolveImage: () =>
      Promise.resolve({
        layers: [
          { digest: 'sha256:a', size: 100, mediaType: 'estargz', lazy: true, uncompressedSize: 300 },
          {
            digest: 'sha256:g',
            size: 50,
            mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
            lazy: false,
          },
        ],
      }),
    holdLayer: (ref, digest) => Promise.resolve(layers.get(`${ref} ${digest}`)!.held),
    freeBytes: () => Promise.resolve(free),
  };
}

const settle = () => new Promise((r) => setImmediate(r));

describe('PinManager', () => {
  it('goes pending -> fetching -> pinned, persists, and resumes from pins.json', async () => {
    await withRoot(async (root) => {
      const l = fakeLayer(true);
      const m = new PinManager(deps(root, new Map([['r sha256:a', l]])));
      const [added] = await m.add(['r']);
      expect(added?.state).toMatch(/pending|fetching/);
      expect(added?.layers[1]).toMatchObject({ lazy: false, estimated: true, uncompressedSize: 150 });
      await settle();
      expect(m.list()[0]?.state).toBe('fetching');
      expect(m.counts()).toEqual({ pending: 0, fetching: 1, pinned: 0, failed: 0 });
      l.finish();
      await m.idle();
      expect(m.list()[0]).toMatchObject({ state: 'pinned', percent: 100 });
      await m.close();
      expect(l.released()).toBe(1);
      const saved = JSON.parse(await readFile(pinsFile(root), 'utf8')) as { pins: Array<{ state: string }> };
      expect(saved.pins.map((p) => p.state)).toEqual(['pinned']);

      // a new manager resumes without resolving the image again
      const l2 = fakeLayer(true);
      const d = deps(root, new Map([['r sha256:a', l2]]));
      d.resolveImage = () => Promise.reject(new Error('no registry'));
      const m2 = new PinManager(d);
      await m2.load();
      l2.finish();
      await m2.idle();
      expect(m2.list()[0]?.state).toBe('pinned');
      await m2.remove(['r']);
      expect(l2.released()).toBe(1);
      await expect(m2.remove(['r'])).rejects.toThrow('not pinned: r');
      await m2.close();
    });
  });

  it('fails an image whose layer did not verify, naming the layer and its error', async () => {
    await withRoot(async (root) => {
      const l = fakeLayer(false, 'registry unreachable');
      const m = new PinManager(deps(root, new Map([['r sha256:a', l]])));
      await m.add(['r']);
      l.finish();
      await m.idle();
      const s = m.list()[0]!;
      expect(s.state).toBe('failed');
      expect(s.error).toContain('sha256:a');
      expect(s.error).toContain('registry unreachable');
      await m.close();
    });
  });

  it('refuses when free space is below twice the uncompressed bytes, saving nothing', async () => {
    await withRoot(async (root) => {
      const m = new PinManager(deps(root, new Map(), 599));
      await expect(m.add(['r'])).rejects.toThrow(/599 B free, 600 B needed \(twice the 300 B still to fetch/);
      expect(m.list()).toEqual([]);
      await expect(readFile(pinsFile(root))).rejects.toThrow();
      await m.close();
    });
  });

  it('a damaged pins.json is a typed error naming the file', async () => {
    await withRoot(async (root) => {
      await writeFile(pinsFile(root), '{"pins": 3');
      await expect(new PinManager(deps(root, new Map())).load()).rejects.toThrow(/pins\.json is damaged/);
    });
  });
});

describe('pin command helpers', () => {
  it('reads one ref per line with # comments', () => {
    expect(parsePinFile('# payload\na.example/x:1\n\n  b.example/y@sha256:00  # why\n#c\n')).toEqual([
      'a.example/x:1',
      'b.example/y@sha256:00',
    ]);
  });

  it('lists pins as a table', () => {
    expect(formatPinList([])).toBe('no pinned images\n');
    const out = formatPinList([
      {
        ref: 'r.example/a:1',
        state: 'failed',
        error: 'boom',
        addedAt: '',
        bytesFetched: 1024,
        totalBytes: 2048,
        percent: 50,
        layers: [
          { digest: 'sha256:a', size: 1, lazy: true, uncompressedSize: 3 },
          { digest: 'sha256:b', size: 1, lazy: false, uncompressedSize: 3 },
        ],
      },
    ]);
    expect(out).toContain('r.example/a:1  failed  1.0 KiB/2.0 KiB  50.0%    1/2 lazy  boom');
  });
});
