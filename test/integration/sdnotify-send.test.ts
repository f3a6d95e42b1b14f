import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sdNotify } from '../../src/util/sd-notify.js';
import { isStoreError } from '../../src/util/errors.js';
import { startNotifyListener, type NotifyListener } from '../helpers/sd-notify-listener.js';

describe('sdNotify over a real unix datagram socket', () => {
  let dir: string;
  let listener: NotifyListener;

  beforeAll(async () => {
    // The kernel attributes a datagram to another pid (SCM_CREDENTIALS) only for root: these tests
    // need it, and say so instead of failing in a confusing way.
    if (process.getuid?.() !== 0) throw new Error('sd-notify tests must run as root (SCM_CREDENTIALS pid)');
    dir = await mkdtemp(join(tmpdir(), 'sdnotify-'));
    listener = await startNotifyListener(join(dir, 'notify.sock'));
  });
  afterAll(async () => {
    await listener?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('delivers READY=1 attributed to this process (works with NotifyAccess=main)', async () => {
    expect(await sdNotify('READY=1', { socket: listener.socket })).toBe(true);
    const m = await listener.waitFor('READY=1', 5000);
    expect(m.msg).toBe('READY=1');
    // The kernel reports the pid from SCM_CREDENTIALS; as root we vouch for ourselves, not the python child.
    expect(m.pid).toBe(process.pid);
  });

  it('uses $NOTIFY_SOCKET by default and keeps multi-line states intact', async () => {
    const saved = process.env.NOTIFY_SOCKET;
    process.env.NOTIFY_SOCKET = listener.socket;
    try {
      expect(await sdNotify('STOPPING=1\nSTATUS=shutting down')).toBe(true);
    } finally {
      if (saved === undefined) delete process.env.NOTIFY_SOCKET;
      else process.env.NOTIFY_SOCKET = saved;
    }
    const m = await listener.waitFor('STOPPING=1', 5000);
    expect(m.msg).toBe('STOPPING=1\nSTATUS=shutting down');
  });

  it('can attribute the message to another pid (the store main pid when a helper sends)', async () => {
    expect(await sdNotify('STATUS=from-parent', { socket: listener.socket, pid: process.ppid })).toBe(true);
    const m = await listener.waitFor('STATUS=from-parent', 5000);
    expect(m.pid).toBe(process.ppid);
  });

  it('supports abstract sockets (@name)', async () => {
    const name = `@stargz-store-test-${process.pid}-${Date.now()}`;
    const abstract = await startNotifyListener(name);
    try {
      expect(await sdNotify('READY=1', { socket: name })).toBe(true);
      const m = await abstract.waitFor('READY=1', 5000);
      expect(m.pid).toBe(process.pid);
    } finally {
      await abstract.close();
    }
  });

  it('falls back to systemd-notify when python3 is not available', async () => {
    expect(
      await sdNotify('READY=1\nSTATUS=fallback', { socket: listener.socket, python: '/nonexistent/python3' }),
    ).toBe(true);
    const m = await listener.waitFor('STATUS=fallback', 5000);
    expect(m.msg.split('\n')).toEqual([`MAINPID=${process.pid}`, 'READY=1', 'STATUS=fallback']);
    expect(m.pid).toBe(process.pid);
  });

  it('returns false and sends nothing without a notify socket', async () => {
    const saved = process.env.NOTIFY_SOCKET;
    delete process.env.NOTIFY_SOCKET;
    try {
      const before = listener.messages.length;
      expect(await sdNotify('READY=1')).toBe(false);
      await new Promise((r) => setTimeout(r, 200));
      expect(listener.messages.length).toBe(before);
    } finally {
      if (saved !== undefined) process.env.NOTIFY_SOCKET = saved;
    }
  });

  it('fails with a typed error when the socket does not exist', async () => {
    const err = await sdNotify('READY=1', { socket: join(dir, 'missing.sock') }).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_IO')).toBe(true);
    expect(String((err as Error).message)).toMatch(/READY=1 failed/);
  });

  it('rejects a relative socket path', async () => {
    const err = await sdNotify('READY=1', { socket: 'relative.sock' }).catch((e: unknown) => e);
    expect(isStoreError(err, 'E_INVALID_ARGUMENT')).toBe(true);
  });
});
