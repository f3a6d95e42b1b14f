/**
 * Every byte fetched once, across restarts (issue 10): from an empty root to a fully verified
 * layer, pulled from the real test registry through a counting proxy, with the store run killed
 * (SIGKILL) and later stopped in the middle of the background fetch, then run to the end. The
 * registry must have sent at most 1.05x the compressed layer size in total, the DiffID must
 * match, and a run after that must fetch nothing.
 *
 * Each store run is a child process (resume-bytes-child.ts); stops happen at byte-count events
 * inside the child, never after a sleep.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildLayerToFile } from '../../src/format/writer/index.js';
import { startCountingProxy, type CountingProxy } from '../helpers/counting-proxy.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { makeTarFixture, pushBlob, seededRandom } from './engine-helpers.js';

const HERE = new URL('.', import.meta.url).pathname;
const CHUNK = 256 * 1024;

let registry: TestRegistry;
let proxy: CountingProxy;
let work: string;
let tarPath: string;

beforeAll(async () => {
  registry = await startRegistry();
  proxy = await startCountingProxy(Number(registry.host.split(':')[1]));
  // ~80 MB of files from 0 bytes to several chunks; even files random (incompressible), odd
  // ones text: blobs of about 40 MB
  const rand = seededRandom(10);
  const sizes: number[] = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1];
  while (sizes.reduce((a, b) => a + b, 0) < 80 * 1024 * 1024) sizes.push(Math.floor(rand() * 6 * CHUNK));
  ({ work, tarPath } = await makeTarFixture('resume-bytes-', sizes));
}, 300_000);

afterAll(async () => {
  await proxy?.close();
  await registry?.stop();
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  out?: {
    fullyVerified: boolean;
    bad: boolean;
    lastError?: string;
    network: number;
    coveredAtStart: number;
  };
  stderr: string;
}

/** One store run in a child process; resolves when it exited and its connections are closed. */
async function storeRun(args: Record<string, unknown>): Promise<RunResult> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      join(HERE, 'engine-ts-loader.mjs'),
      join(HERE, 'resume-bytes-child.ts'),
      JSON.stringify(args),
    ],
    { cwd: join(HERE, '..', '..'), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((r) =>
    child.once('close', (c, s) => r([c, s])),
  );
  await proxy.whenIdle();
  const last = stdout.trim().split('\n').pop();
  return { code, signal, stderr, ...(last ? { out: JSON.parse(last) as RunResult['out'] } : {}) };
}

describe.each(['estargz', 'zstd:chunked'] as const)('resume after restarts (%s)', (format) => {
  it(
    'empty root -> killed -> stopped -> fully verified: registry bytes <= 1.05x the blob',
    { timeout: 600_000 },
    async () => {
      const blobFile = join(work, `${format.replace(':', '-')}.blob`);
      const built = await buildLayerToFile(tarPath, blobFile, {
        format,
        chunkSize: CHUNK,
        gzipLevel: 1,
        zstdLevel: 1,
      });
      const blob = await readFile(blobFile);
      const size = blob.length;
      expect(size).toBeGreaterThan(32 * 1024 * 1024);
      const repo = `resume/${format.replace(':', '-')}`;
      const digest = await pushBlob(registry.url, repo, blob);
      const root = await mkdtemp(join(work, 'root-'));
      const base = { root, blobFile, ref: `${proxy.host}/${repo}:latest`, digest, diffID: built.diffID };
      const start = proxy.upstreamBytes;

      // 1. killed on the spot after 30% of the blob came in
      const killed = await storeRun({ ...base, mode: 'kill', stopAt: Math.floor(0.3 * size) });
      expect(killed.signal, killed.stderr).toBe('SIGKILL');
      const afterKill = proxy.upstreamBytes - start;
      // (the child's count includes block-cache hits at widened range ends: a little above the proxy's)
      expect(afterKill).toBeGreaterThan(0.25 * size);
      expect(afterKill).toBeLessThan(0.5 * size);

      // 2. stopped (clean shutdown) after another 40%; it resumed with what the killed run stored
      const stopped = await storeRun({ ...base, mode: 'stop', stopAt: Math.floor(0.4 * size) });
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(stopped.out!.fullyVerified).toBe(false);
      expect(stopped.out!.coveredAtStart).toBeGreaterThan(0.2 * size);
      const afterStop = proxy.upstreamBytes - start;

      // 3. to the end: the DiffID check runs over the whole stream and matches
      const finished = await storeRun({ ...base, mode: 'run' });
      expect(finished.code, finished.stderr).toBe(0);
      expect(finished.out).toMatchObject({ fullyVerified: true, bad: false });
      expect(finished.out!.coveredAtStart).toBeGreaterThan(0.6 * size);
      const total = proxy.upstreamBytes - start;
      // received but not on record when each run ended (fetched again later): the diagnosis if
      // the bound is missed
      const lostAtKill = afterKill - stopped.out!.coveredAtStart;
      const lostAtStop = afterStop - afterKill - (finished.out!.coveredAtStart - stopped.out!.coveredAtStart);
      process.stdout.write(
        `${format}: blob ${size} B, registry ${total} B = ${(total / size).toFixed(4)}x ` +
          `(not kept: ${lostAtKill} B at the kill, ${lostAtStop} B at the stop)\n`,
      );
      expect(total).toBeGreaterThanOrEqual(size);
      expect(total / size).toBeLessThanOrEqual(1.05);

      // the compressed copy is gone once verified; chunks and the verified state stay
      expect(await readdir(join(root, 'blobs', 'sha256'))).toEqual([]);
      expect((await stat(join(root, 'layers'))).isDirectory()).toBe(true);

      // 4. another run on the same root fetches nothing
      const again = await storeRun({ ...base, mode: 'run' });
      expect(again.out).toMatchObject({ fullyVerified: true, network: 0 });
      expect(proxy.upstreamBytes - start).toBe(total);
    },
  );
});
