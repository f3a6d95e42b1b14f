import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { startFaultServer, type FaultServer } from './fault-server.js';

/** The set-up of the engine-over-a-registry tests: blobs served over HTTP, and a temp root. */

export interface BlobServerEnv {
  /** The fault server (no faults) serving the blobs; set in beforeAll. */
  srv: FaultServer;
  /** A temp directory for caches; set in beforeAll, removed in afterAll. */
  root: string;
}

/** For the enclosing describe: serve `blobs` (digest -> bytes) and make a temp root named `prefix`*. */
export function useBlobServer(blobs: Record<string, Buffer>, prefix: string): BlobServerEnv {
  const env = {} as BlobServerEnv;
  beforeAll(async () => {
    env.srv = await startFaultServer({ blobs });
    env.root = await mkdtemp(join(tmpdir(), prefix));
  });
  afterAll(async () => {
    await env.srv?.stop();
    if (env.root) await rm(env.root, { recursive: true, force: true });
  });
  return env;
}

/** The byte ranges of a request's Range header (`bytes=a-b,c-d`) as [start, end) pairs. */
export function parseRange(h: string | string[] | undefined): Array<{ start: number; end: number }> {
  const v = Array.isArray(h) ? h[0] : h;
  expect(v).toMatch(/^bytes=/);
  return v!
    .slice('bytes='.length)
    .split(',')
    .map((p) => {
      const [a, b] = p.split('-').map(Number);
      return { start: a!, end: b! + 1 };
    });
}
