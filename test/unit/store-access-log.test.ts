import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  AccessLog,
  ByteCoverage,
  type AccessLine,
  type AccessSink,
  type AccessTarget,
} from '../../src/store/access-log.js';
import { buildConfig } from '../../src/store/config/load.js';
import { isStoreError } from '../../src/util/errors.js';

/** A sink whose writes can be held open, to see what the log does while the disk is slow. */
class HeldSink implements AccessSink {
  writes: string[][] = [];
  closed = false;
  hold = false;
  private waiting: Array<() => void> = [];

  write(data: Buffer): Promise<void> {
    this.writes.push(data.toString('utf8').split('\n').filter(Boolean));
    if (!this.hold) return Promise.resolve();
    return new Promise((r) => this.waiting.push(r));
  }

  release(): void {
    this.hold = false;
    for (const r of this.waiting.splice(0)) r();
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  lines(): AccessLine[] {
    return this.writes.flat().map((l) => JSON.parse(l) as AccessLine);
  }
}

const REF = 'registry.example:5000/app:v1';
const D1 = `sha256:${'1'.repeat(64)}`;
const D2 = `sha256:${'2'.repeat(64)}`;
const TOC = `sha256:${'7'.repeat(64)}`;
const target = (path: string, digest = D1, size = 1000): AccessTarget => ({
  ref: REF,
  digest,
  tocDigest: TOC,
  path,
  size,
});
const tick = () => new Promise((r) => setTimeout(r, 0));

describe('access log: what is recorded', () => {
  it('writes one open line per (ref, ALS digest, path), however often and through whatever handle', async () => {
    const sink = new HeldSink();
    const log = new AccessLog(sink, { flushMs: 60_000, now: () => new Date('2024-05-06T07:08:09.010Z') });
    const a = log.opened(target('usr/bin/python3'));
    const b = log.opened(target('usr/bin/python3'));
    expect(a).toBeDefined();
    expect(b).toBe(a);
    log.opened(target('usr/bin/python3', D2)); // same file under another ALS name: its own line
    log.opened(target('etc/passwd'));
    log.readlinked(target('usr/lib64/ld-linux-x86-64.so.2', D1, 26));
    log.readlinked(target('usr/lib64/ld-linux-x86-64.so.2', D1, 26));
    await log.flush();
    expect(sink.lines()).toEqual([
      { time: '2024-05-06T07:08:09.010Z', event: 'open', ...target('usr/bin/python3') },
      { time: '2024-05-06T07:08:09.010Z', event: 'open', ...target('usr/bin/python3', D2) },
      { time: '2024-05-06T07:08:09.010Z', event: 'open', ...target('etc/passwd') },
      {
        time: '2024-05-06T07:08:09.010Z',
        event: 'readlink',
        ...target('usr/lib64/ld-linux-x86-64.so.2', D1, 26),
      },
    ]);
    await log.close();
  });

  it('reports distinct bytes read at release, only when they grew, and for open handles at close', async () => {
    const sink = new HeldSink();
    const log = new AccessLog(sink, { flushMs: 60_000 });
    const t = log.opened(target('model/shard-0', D1, 1 << 20))!;
    t.read(0, 4096);
    t.read(0, 4096); // re-read of the same page: not counted twice
    t.read(8192, 100);
    t.release();
    t.release(); // nothing new: no second line
    const u = log.opened(target('model/shard-1', D1, 1 << 20))!;
    u.read(100, 50); // never released: its count comes at close
    t.read(4096, 4096); // fills the hole between the two earlier ranges
    t.release();
    await log.close();
    const reads = sink
      .lines()
      .filter((l) => l.event === 'read')
      .map((l) => [(l as { path: string }).path, (l as { bytesRead: number }).bytesRead]);
    expect(reads).toEqual([
      ['model/shard-0', 4096 + 100],
      ['model/shard-0', 8192 + 100],
      ['model/shard-1', 50],
    ]);
    expect(sink.closed).toBe(true);
  });

  it('records nothing after close', async () => {
    const sink = new HeldSink();
    const log = new AccessLog(sink);
    await log.close();
    expect(log.opened(target('a'))).toBeUndefined();
    log.readlinked(target('b'));
    await log.flush();
    expect(sink.writes).toEqual([]);
  });
});

describe('access log: batching, bound and flushing', () => {
  it('batches lines: a full batch starts a write, lines queued meanwhile go in the next one', async () => {
    const sink = new HeldSink();
    sink.hold = true;
    const log = new AccessLog(sink, { batchLines: 3, flushMs: 60_000 });
    for (let i = 0; i < 3; i++) log.opened(target(`f${i}`));
    expect(sink.writes.map((w) => w.length)).toEqual([3]);
    for (let i = 3; i < 7; i++) log.opened(target(`f${i}`));
    // a second full batch while the first write is held: still one write in flight
    expect(sink.writes.map((w) => w.length)).toEqual([3]);
    sink.release();
    await log.flush();
    expect(sink.writes.map((w) => w.length)).toEqual([3, 4]);
    expect(log.stats()).toMatchObject({ recorded: 7, written: 7, dropped: 0, pending: 0 });
    await log.close();
  });

  it('writes a partial batch after flushMs, not before', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const sink = new HeldSink();
      const log = new AccessLog(sink, { batchLines: 100, flushMs: 80 });
      log.opened(target('only'));
      await vi.advanceTimersByTimeAsync(79);
      expect(sink.writes).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(sink.writes.map((w) => w.length)).toEqual([1]);
      await log.close();
    } finally {
      vi.useRealTimers();
    }
  });

  it('holds at most maxPending lines while the writer is stuck, drops and counts the rest', async () => {
    const sink = new HeldSink();
    sink.hold = true;
    const log = new AccessLog(sink, { batchLines: 1, maxPending: 5, flushMs: 60_000 });
    log.opened(target('first')); // goes to the (stuck) writer at once
    await tick();
    for (let i = 0; i < 12; i++) log.opened(target(`x${i}`));
    expect(log.stats()).toMatchObject({ recorded: 13, pending: 5, dropped: 7, written: 0 });
    sink.release();
    await log.close();
    const lines = sink.lines();
    expect(lines.filter((l) => l.event === 'open').map((l) => (l as { path: string }).path)).toEqual([
      'first',
      'x0',
      'x1',
      'x2',
      'x3',
      'x4',
    ]);
    expect(lines.at(-1)).toMatchObject({ event: 'dropped', count: 7 });
    expect(log.stats()).toMatchObject({ written: 6, dropped: 7, pending: 0 });
  });

  it('counts lines a failing write lost, and keeps serving', async () => {
    let fail = true;
    const got: string[] = [];
    const sink: AccessSink = {
      write: async (d) => {
        if (fail) throw new Error('disk full');
        got.push(d.toString());
      },
      close: async () => undefined,
    };
    const log = new AccessLog(sink, { batchLines: 2, flushMs: 60_000 });
    log.opened(target('a'));
    log.opened(target('b'));
    await log.flush();
    fail = false;
    log.opened(target('c'));
    await log.close();
    expect(log.stats()).toMatchObject({ written: 1, dropped: 2, writeErrors: 1 });
    expect(got.join('')).toContain('"path":"c"');
    expect(got.join('')).toContain('"event":"dropped","count":2');
  });

  it('close() writes what is queued below the batch size, then closes the sink', async () => {
    const sink = new HeldSink();
    const log = new AccessLog(sink, { batchLines: 1000, flushMs: 60_000 });
    for (let i = 0; i < 10; i++) log.opened(target(`q${i}`));
    expect(sink.writes).toEqual([]);
    await log.close();
    expect(sink.lines()).toHaveLength(10);
    expect(sink.closed).toBe(true);
  });
});

describe('distinct byte coverage', () => {
  it('equals a byte-by-byte count for any set of ranges (no cap reached)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat(2000), fc.nat(300)), { maxLength: 60 }),
        (ranges: Array<[number, number]>) => {
          const c = new ByteCoverage(1000);
          const seen = new Uint8Array(2400);
          for (const [s, n] of ranges) {
            c.add(s, s + n);
            seen.fill(1, s, s + n);
          }
          expect(c.total).toBe(seen.reduce((a, b) => a + b, 0));
          expect(c.approximate).toBe(false);
        },
      ),
    );
  });

  it('stays within its interval cap by over-counting, and says so', () => {
    const c = new ByteCoverage(4);
    // 10 separate 10-byte ranges 100 bytes apart: 100 distinct bytes
    for (let i = 0; i < 10; i++) c.add(i * 100, i * 100 + 10);
    expect(c.intervals).toBeLessThanOrEqual(4);
    expect(c.approximate).toBe(true);
    expect(c.total).toBeGreaterThanOrEqual(100);
    expect(c.total).toBeLessThanOrEqual(910); // never more than the span read
  });
});

describe('access log file', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sgz-acclog-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('appends JSON lines to the file (existing content kept)', async () => {
    const p = join(dir, 'acc.jsonl');
    await writeFile(p, '{"earlier":true}\n');
    const log = await AccessLog.toFile(p, { flushMs: 10 });
    log.opened(target('bin/sh', D1, 125_560));
    log.readlinked(target('lib64', D1, 9));
    await log.close();
    const lines = (await readFile(p, 'utf8')).trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    expect(JSON.parse(lines[0]!)).toEqual({ earlier: true });
    const open = JSON.parse(lines[1]!) as Record<string, unknown>;
    expect(open).toMatchObject({ event: 'open', ref: REF, digest: D1, tocDigest: TOC, path: 'bin/sh' });
    expect(open.size).toBe(125_560);
    expect(Date.parse(String(open.time))).toBeGreaterThan(Date.parse('2020-01-01'));
    expect(JSON.parse(lines[2]!)).toMatchObject({ event: 'readlink', path: 'lib64', size: 9 });
  });

  it('fails at start-up with E_CONFIG naming the path when the file cannot be opened', async () => {
    const p = join(dir, 'missing-dir', 'acc.jsonl');
    const err = await AccessLog.toFile(p).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_CONFIG')).toBe(true);
    expect((err as Error).message).toContain(p);
  });
});

describe('[debug] record_accesses and --record-accesses', () => {
  const MNT = { mountpoint: '/var/lib/stargz-store/store' };

  it('is off by default', () => {
    expect(buildConfig(undefined, MNT).config).toMatchObject({ recordAccesses: '', debug: false });
  });

  it('reads the [debug] table; fuse carries the Go debug meaning', () => {
    const { config, warnings } = buildConfig(
      '[debug]\nfuse = true\nrecord_accesses = "/tmp/acc.jsonl"\nwhat = 1\n',
      MNT,
    );
    expect(config).toMatchObject({ debug: true, recordAccesses: '/tmp/acc.jsonl' });
    expect(warnings).toEqual(['unknown config key [debug] what (ignored)']);
  });

  it('keeps the Go boolean debug key working', () => {
    expect(buildConfig('debug = true\n', MNT).config).toMatchObject({ debug: true, recordAccesses: '' });
  });

  it('rejects a relative path or a non-string with a message naming the key', () => {
    for (const bad of ['record_accesses = "acc.jsonl"', 'record_accesses = 3']) {
      try {
        buildConfig(`[debug]\n${bad}\n`, MNT);
        expect.unreachable();
      } catch (e) {
        expect(isStoreError(e, 'E_CONFIG')).toBe(true);
        expect((e as Error).message).toContain('[debug] record_accesses');
      }
    }
    expect(() => buildConfig('debug = "yes"\n', MNT)).toThrow(/config key debug/);
  });

  it('the flag wins over the file and is made absolute; an empty flag turns recording off', () => {
    const file = '[debug]\nrecord_accesses = "/from/file.jsonl"\n';
    expect(buildConfig(file, { ...MNT, recordAccesses: 'rel/acc.jsonl' }).config.recordAccesses).toBe(
      join(process.cwd(), 'rel/acc.jsonl'),
    );
    expect(buildConfig(file, { ...MNT, recordAccesses: '' }).config.recordAccesses).toBe('');
  });

  it('--set debug.record_accesses works when the file has no Go debug boolean', () => {
    const { config } = buildConfig(undefined, { ...MNT, set: ['debug.record_accesses="/x/acc.jsonl"'] });
    expect(config.recordAccesses).toBe('/x/acc.jsonl');
  });
});
