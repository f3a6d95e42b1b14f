import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  FileProfileSource,
  prioritizeForLayers,
  profileFromStoreRecord,
  profileSource,
  selectPrioritized,
  StoreProfileSource,
} from '../../bench/lib/profile.js';
import { AccessLog, type AccessSink, type AccessTarget } from '../../src/store/access-log.js';
import { isStoreError } from '../../src/util/errors.js';

/** The bench's `store` profile source reading what the store's access log writes. */

const REF = '127.0.0.1:5000/bench/large:estargz';
const L0 = `sha256:${'a'.repeat(64)}`;
const L0_TOC = `sha256:${'b'.repeat(64)}`;
const L1 = `sha256:${'c'.repeat(64)}`;
const OTHER = `sha256:${'d'.repeat(64)}`;
const MiB = 1 << 20;

/** Produce a record with the store's own writer, as the profiled store would. */
async function record(events: (log: AccessLog) => void): Promise<string> {
  const chunks: Buffer[] = [];
  const sink: AccessSink = {
    write: async (d) => {
      chunks.push(Buffer.from(d));
    },
    close: async () => undefined,
  };
  const log = new AccessLog(sink, { flushMs: 60_000 });
  events(log);
  await log.close();
  return Buffer.concat(chunks).toString('utf8');
}

const t = (digest: string, path: string, size: number): AccessTarget => ({
  ref: REF,
  digest,
  tocDigest: digest === L1 ? L1 : L0_TOC,
  path,
  size,
});

describe('store access record -> access profile', () => {
  it('maps layer paths to image paths in first-open order across layers, ignoring other layers', async () => {
    const text = await record((log) => {
      log.opened(t(L0, 'usr/bin/python3.11', 6 * MiB));
      log.readlinked(t(L0, 'usr/bin/python3', 10));
      log.opened(t(OTHER, 'not/this/image', 5)); // another image's layer
      log.opened(t(L1, 'app/run.py', 900));
      // the same layer opened under its TOC digest (NEW clients): same image path, no duplicate
      log.opened(t(L0_TOC, 'usr/bin/python3.11', 6 * MiB));
      log.opened(t(L0, 'etc/passwd', 300));
    });
    const p = profileFromStoreRecord(text, [[L0, L0_TOC], [L1]]);
    expect(p.source).toBe('store');
    expect(p.files).toEqual(['/usr/bin/python3.11', '/usr/bin/python3', '/app/run.py', '/etc/passwd']);
    // symlinks have no details (they are always prioritised); regular files carry their size
    expect(p.details).toEqual({
      '/usr/bin/python3.11': { size: 6 * MiB },
      '/app/run.py': { size: 900 },
      '/etc/passwd': { size: 300 },
    });
  });

  it('takes distinct bytes read from the store, so big barely-read files stay out of the prioritised list', async () => {
    const text = await record((log) => {
      const shard = log.opened(t(L1, 'models/shard-0.bin', 64 * MiB))!;
      shard.read(0, MiB);
      shard.release();
      shard.read(32 * MiB, MiB);
      shard.release();
      const vocab = log.opened(t(L1, 'models/vocab.bin', 20 * MiB))!;
      vocab.read(0, 12 * MiB);
      // still open at shutdown: reported by close()
      log.opened(t(L0, 'usr/lib/libpython.so', 8 * MiB))!.read(0, MiB);
    });
    const p = profileFromStoreRecord(text, [[L0, L0_TOC], [L1]]);
    expect(p.details['/models/shard-0.bin']).toEqual({ size: 64 * MiB, bytesRead: 2 * MiB });
    expect(p.details['/models/vocab.bin']).toEqual({ size: 20 * MiB, bytesRead: 12 * MiB });
    expect(p.details['/usr/lib/libpython.so']).toEqual({ size: 8 * MiB, bytesRead: MiB });
    const chosen = selectPrioritized(p);
    expect(chosen.files).toEqual(['/models/vocab.bin', '/usr/lib/libpython.so']);
    expect(chosen.skipped).toEqual([{ path: '/models/shard-0.bin', size: 64 * MiB, bytesRead: 2 * MiB }]);
    const perLayer = prioritizeForLayers(chosen.files, [
      new Set(['usr/lib/libpython.so', 'usr/bin/python3']),
      new Set(['models/vocab.bin', 'models/shard-0.bin']),
    ]);
    expect(perLayer).toEqual([['usr/lib/libpython.so'], ['models/vocab.bin']]);
  });

  it('refuses a record that lost lines, and a record with nothing readable', async () => {
    const dropped = '{"time":"2024-01-01T00:00:00.000Z","event":"dropped","count":3}\n';
    try {
      profileFromStoreRecord(dropped, [[L0]]);
      expect.unreachable();
    } catch (e) {
      expect(isStoreError(e, 'E_IO')).toBe(true);
      expect((e as Error).message).toContain('dropped 3');
    }
    expect(() => profileFromStoreRecord('not json\n{"trunc', [[L0]])).toThrow(/unreadable/);
    expect(profileFromStoreRecord('', [[L0]]).files).toEqual([]);
  });

  it('store is the default-named source and needs the harness lazy run', async () => {
    expect(profileSource('store')).toBeInstanceOf(StoreProfileSource);
    const err = await new StoreProfileSource()
      .record({ rootfs: '/', argv: ['true'], env: [], workingDir: '/', scratch: tmpdir() })
      .catch((e: unknown) => e);
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
  });

  it('runs the lazy run with a record file and reads the record it leaves', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sgz-sprof-'));
    try {
      const text = await record((log) => {
        log.opened(t(L0, 'bin/sh', 1000));
      });
      let asked = '';
      const p = await new StoreProfileSource().record({
        rootfs: '/',
        argv: ['sh'],
        env: [],
        workingDir: '/',
        scratch: dir,
        label: 'small-k',
        lazyRun: async (file) => {
          asked = file;
          await writeFile(file, text);
          return { layerDigests: [[L0]] };
        },
      });
      expect(asked).toBe(join(dir, 'small-k.accesses.jsonl'));
      expect(p.files).toEqual(['/bin/sh']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('file:<record.jsonl> reads a store record against the image rootfs', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sgz-fprof-'));
    try {
      const root = join(dir, 'root');
      await mkdir(join(root, 'bin'), { recursive: true });
      await writeFile(join(root, 'bin/busybox'), 'x'.repeat(50));
      await symlink('busybox', join(root, 'bin/sh'));
      const text = await record((log) => {
        log.readlinked(t(L0, 'bin/sh', 7));
        log.opened(t(L0, 'bin/busybox', 50));
        log.opened(t(L0, 'gone/file', 1)); // not in this rootfs: dropped by canonicalisation
      });
      const f = join(dir, 'rec.jsonl');
      await writeFile(f, text);
      const p = await new FileProfileSource(f).record({
        rootfs: root,
        argv: [],
        env: [],
        workingDir: '/',
        scratch: dir,
      });
      expect(p.files).toEqual(['/bin/sh', '/bin/busybox']);
      expect(p.details['/bin/busybox']).toEqual({ size: 50 });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
