import { createCipheriv, createHash } from 'node:crypto';
import { mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/**
 * A fake "AI/ML" payload (TypeScript port of shared/lab/gen-model-data.py): safetensors-like weight
 * shards, an ONNX and an npy blob, 1-8 MiB shards — all incompressible — plus thousands of small
 * compressible .py-like files and an entrypoint (/app/run.py, python3 from the image) that touches well
 * under 5% of the bytes. Content is a deterministic function of (seed, path): AES-256-CTR keystream for
 * random bytes, a seeded PRNG for sizes and text, so a cached tree can be rebuilt bit for bit.
 */

export interface ModelDataParams {
  /** 1.0 = ~1.37 GB of payload; 0.05 for quick runs. */
  scale: number;
  seed: number;
}

export interface ModelDataResult {
  dir: string;
  params: ModelDataParams;
  totalBytes: number;
  fileCount: number;
  /** Bytes the entrypoint reads (file contents; the interpreter itself not counted). */
  touchedBytes: number;
  cmd: string[];
  /** A line the entrypoint must print when every byte it read was right. */
  expectedOutput: string;
}

const MiB = 1 << 20;

/** mulberry32: tiny seeded PRNG (sizes, word choice); not for anything secret. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Deterministic incompressible bytes for `name`: AES-256-CTR keystream under key sha256(seed:name). */
export function keystream(seed: number, name: string): (n: number) => Buffer {
  const key = createHash('sha256').update(`${seed}:${name}`).digest();
  const c = createCipheriv('aes-256-ctr', key, Buffer.alloc(16));
  return (n) => c.update(Buffer.alloc(n));
}

const WORDS = [
  'def', 'return', 'self', 'import', 'tensor', 'layer', 'weight', 'class', 'None', 'for', 'in', 'range',
  'numpy', 'torch', 'config', '=', '(', ')', ':', '\n    ',
]; // prettier-ignore

export function textBlob(rand: () => number, n: number): string {
  const parts: string[] = [];
  let size = 0;
  while (size < n) {
    const w = WORDS[Math.floor(rand() * WORDS.length)]! + ' ';
    parts.push(w);
    size += w.length;
  }
  return parts.join('').slice(0, n);
}

export function runPy(readBytes: number, modules: readonly string[]): string {
  return `import hashlib, json, struct, time
t0 = time.time()
h = hashlib.sha256()
cfg = json.load(open("/models/llm/config.json"))
tok = json.load(open("/models/llm/tokenizer.json"))
with open("/models/llm/model-00001-of-00003.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    h.update(f.read(${readBytes}))  # "warm up" the first weights
for p in ${JSON.stringify(modules)}:
    with open(p, "rb") as f:
        h.update(f.read())
print("model-ok layers=%d tensors=%d vocab=%d sha256=%s" % (cfg["num_hidden_layers"], len(hdr) - 1, len(tok["model"]["vocab"]), h.hexdigest()))
print("elapsed %.3fs" % (time.time() - t0))
`;
}

class Writer {
  total = 0;
  count = 0;
  constructor(private readonly root: string) {}

  async bytes(rel: string, data: Buffer | string): Promise<void> {
    const p = join(this.root, rel);
    await mkdir(dirname(p), { recursive: true });
    await writeFile(p, data);
    this.total += Buffer.byteLength(data);
    this.count++;
  }

  /** `size` random bytes after an optional prefix; returns the first `keep` random bytes. */
  async random(rel: string, size: number, seed: number, prefix?: Buffer, keep = 0): Promise<Buffer> {
    const p = join(this.root, rel);
    await mkdir(dirname(p), { recursive: true });
    const fh = await open(p, 'w');
    const next = keystream(seed, rel);
    let kept: Buffer = Buffer.alloc(0);
    try {
      if (prefix) await fh.write(prefix);
      let left = size;
      while (left > 0) {
        const chunk = next(Math.min(left, 8 * MiB));
        if (kept.length < keep) kept = Buffer.concat([kept, chunk.subarray(0, keep - kept.length)]);
        await fh.write(chunk);
        left -= chunk.length;
      }
    } finally {
      await fh.close();
    }
    this.total += size + (prefix?.length ?? 0);
    this.count++;
    return kept;
  }
}

/** Build (or reuse, when the marker matches) the payload tree at `dir`. */
export async function generateModelData(dir: string, params: ModelDataParams): Promise<ModelDataResult> {
  const marker = `${dir}.json`;
  const cached = await readFile(marker, 'utf8').catch(() => '');
  if (cached) {
    const r = JSON.parse(cached) as ModelDataResult;
    if (r.params.scale === params.scale && r.params.seed === params.seed && r.dir === dir) return r;
  }
  const tmp = `${dir}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  await rm(dir, { recursive: true, force: true });
  const w = new Writer(tmp);
  const rand = prng(params.seed);
  const S = (x: number) => Math.max(1, Math.floor(x * params.scale));

  await w.bytes(
    'models/llm/config.json',
    JSON.stringify(
      {
        architectures: ['FakeLM'],
        hidden_size: 4096,
        num_hidden_layers: 32,
        vocab_size: 32000,
        torch_dtype: 'float16',
      },
      null,
      2,
    ),
  );
  const vocab: Record<string, number> = {};
  const vocabSize = S(80000);
  for (let i = 0; i < vocabSize; i++) vocab[`tok${i}`] = i;
  const tokenizer = JSON.stringify({ model: { vocab } });
  await w.bytes('models/llm/tokenizer.json', tokenizer);

  const readBytes = Math.max(256 * 1024, Math.min(8 * MiB, Math.floor(8 * MiB * params.scale)));
  let firstWeights: Buffer = Buffer.alloc(0);
  let tensors = 0;
  for (const [i, mb] of [400, 400, 250].entries()) {
    const size = S(mb) * MiB;
    const body = size - 4096;
    const hdr: Record<string, unknown> = { __metadata__: { format: 'pt' } };
    let off = 0;
    let t = 0;
    while (off < body) {
      const n = Math.min(body - off, [4, 16, 64][Math.floor(rand() * 3)]! * MiB);
      hdr[`model.layers.${t}.weight`] = { dtype: 'F16', shape: [n / 2], data_offsets: [off, off + n] };
      off += n;
      t++;
    }
    let h = JSON.stringify(hdr);
    h += ' '.repeat((8 - (Buffer.byteLength(h) % 8)) % 8);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(Buffer.byteLength(h)));
    const name = `models/llm/model-0000${i + 1}-of-00003.safetensors`;
    const kept = await w.random(
      name,
      body,
      params.seed,
      Buffer.concat([len, Buffer.from(h)]),
      i === 0 ? readBytes : 0,
    );
    if (i === 0) {
      firstWeights = kept;
      tensors = t;
    }
  }
  await w.random('models/vision/resnet50.onnx', S(90) * MiB, params.seed);
  await w.random('models/embeddings/emb.npy', S(60) * MiB, params.seed);
  for (let i = 0; i < S(30); i++) {
    const mb = 1 + Math.floor(rand() * 8);
    await w.random(`models/shards/shard-${String(i).padStart(2, '0')}.bin`, mb * MiB, params.seed);
  }
  const sp = 'opt/venv/lib/python3.11/site-packages';
  const pkgs = S(200);
  const modules: string[] = [];
  const moduleBytes: Buffer[] = [];
  for (let p = 0; p < pkgs; p++) {
    for (let m = 0; m < 20; m++) {
      const rel = `${sp}/pkg${String(p).padStart(3, '0')}/mod${String(m).padStart(2, '0')}.py`;
      const text = Buffer.from(textBlob(rand, 512 + Math.floor(rand() * (16 * 1024 - 512))));
      await w.bytes(rel, text);
      // the entrypoint "imports" the first two packages
      if (p < 2) {
        modules.push('/' + rel);
        moduleBytes.push(text);
      }
    }
  }
  await w.bytes('app/run.py', runPy(readBytes, modules));

  const h = createHash('sha256').update(firstWeights);
  for (const b of moduleBytes) h.update(b);
  const touched = readBytes + Buffer.byteLength(tokenizer) + moduleBytes.reduce((s, b) => s + b.length, 0);
  await rename(tmp, dir);
  const result: ModelDataResult = {
    dir,
    params,
    totalBytes: w.total,
    fileCount: w.count,
    touchedBytes: touched,
    cmd: ['python3', '/app/run.py'],
    expectedOutput: `model-ok layers=32 tensors=${tensors} vocab=${vocabSize} sha256=${h.digest('hex')}`,
  };
  await writeFile(marker, JSON.stringify(result));
  return result;
}
