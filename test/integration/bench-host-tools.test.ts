/**
 * Bench helpers checked against the host's own tools: python3 runs the generated model payload,
 * readelf reads the host binaries. Missing tools fail loudly.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, open as openFile, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateModelData, type ModelDataResult } from '../../bench/lib/model-data.js';
import { interpreterOf } from '../../bench/lib/profile.js';

const exec = promisify(execFile);
let dir: string;
let md: ModelDataResult;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sgz-bench-host-'));
  md = await generateModelData(join(dir, 'a'), { scale: 0.02, seed: 7 });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('model payload', () => {
  it('the entrypoint, run by python3, prints exactly the expected line', async () => {
    // run.py uses image paths (/models, /opt): point them at the generated tree
    const src = (await readFile(join(md.dir, 'app/run.py'), 'utf8'))
      .replaceAll('"/models/', `"${md.dir}/models/`)
      .replaceAll('"/opt/', `"${md.dir}/opt/`);
    await writeFile(join(dir, 'run-host.py'), src);
    const { stdout } = await exec('python3', [join(dir, 'run-host.py')]);
    expect(stdout.split('\n')[0]).toBe(md.expectedOutput);
  });
});

describe('interpreters of host binaries', () => {
  const fileReader = (path: string) => async (offset: number, length: number) => {
    const fh = await openFile(path, 'r');
    try {
      const b = Buffer.alloc(length);
      const { bytesRead } = await fh.read(b, 0, length, offset);
      return b.subarray(0, bytesRead);
    } finally {
      await fh.close();
    }
  };

  it('finds PT_INTERP of a dynamic ELF binary like readelf does', async () => {
    const { stdout } = await promisify(execFile)('readelf', ['-l', '/usr/bin/ls']);
    const want = /Requesting program interpreter: ([^\]]+)\]/.exec(stdout)![1];
    expect(await interpreterOf(fileReader('/usr/bin/ls'))).toBe(want);
    // static binaries have none
    expect(await interpreterOf(fileReader('/bin/busybox'))).toBeUndefined();
  });
});
