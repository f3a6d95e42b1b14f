import { createHash } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateModelData, type ModelDataResult } from '../../bench/lib/model-data.js';

let dir: string;
let md: ModelDataResult;

async function files(root: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(root, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push(relative(root, join(e.parentPath, e.name)));
  }
  return out.sort();
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sgz-bench-model-'));
  md = await generateModelData(join(dir, 'a'), { scale: 0.02, seed: 7 });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('model payload', () => {
  it('touches well under 5% of the payload, and the weights are incompressible', async () => {
    expect(md.touchedBytes / md.totalBytes).toBeLessThan(0.05);
    const w = await readFile(join(md.dir, 'models/vision/resnet50.onnx'));
    expect(gzipSync(w, { level: 6 }).length).toBeGreaterThan(w.length * 0.99);
    const py = await readFile(join(md.dir, 'opt/venv/lib/python3.11/site-packages/pkg000/mod00.py'));
    expect(gzipSync(py).length).toBeLessThan(py.length * 0.6);
  });

  it('writes a safetensors header that describes the file', async () => {
    const f = await readFile(join(md.dir, 'models/llm/model-00002-of-00003.safetensors'));
    const n = Number(f.readBigUInt64LE(0));
    const hdr = JSON.parse(f.subarray(8, 8 + n).toString()) as Record<string, { data_offsets?: number[] }>;
    const ends = Object.values(hdr).flatMap((t) => (t.data_offsets ? [t.data_offsets[1]!] : []));
    expect(8 + n + Math.max(...ends)).toBe(f.length);
    expect(n % 8).toBe(0);
  });

  it('reports its size and is a deterministic function of (scale, seed); cached runs are reused', async () => {
    const all = await files(md.dir);
    let total = 0;
    for (const f of all) total += (await stat(join(md.dir, f))).size;
    expect(md.totalBytes).toBe(total);
    expect(md.fileCount).toBe(all.length);
    const again = await generateModelData(join(dir, 'b'), { scale: 0.02, seed: 7 });
    const digest = async (root: string) => {
      const h = createHash('sha256');
      for (const f of await files(root)) h.update(f).update(await readFile(join(root, f)));
      return h.digest('hex');
    };
    expect(await digest(again.dir)).toBe(await digest(md.dir));
    const other = await generateModelData(join(dir, 'c'), { scale: 0.002, seed: 8 });
    expect(other.expectedOutput).not.toBe(md.expectedOutput);
    // a cached run reuses the tree: it writes nothing (mtimes unchanged)
    const before = await stat(join(md.dir, 'models/vision/resnet50.onnx'));
    const cached = await generateModelData(join(dir, 'a'), { scale: 0.02, seed: 7 });
    expect(cached).toEqual(md);
    expect((await stat(join(md.dir, 'models/vision/resnet50.onnx'))).mtimeMs).toBe(before.mtimeMs);
  });
});
