import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { generateModelData } from '../lib/model-data.js';
import { DEFAULT_PATH } from '../lib/busybox-image.js';
import type { ImageSpec } from '../lib/oci.js';
import { say } from '../lib/proc.js';
import { aptMirror, buildMinbase, buildPackageLayer } from '../lib/rootfs.js';
import { createLayerTar, type LayerTar } from '../lib/tarball.js';

/**
 * The three workloads of the issue, built offline (only the Debian mirror is contacted) and cached
 * under the work dir keyed by their parameters:
 *   small  : debootstrap minbase (1 layer)
 *   python : + python3 from Debian (2 layers)
 *   large  : + fake model payload (3 layers), entrypoint python3 /app/run.py touching < 5% of bytes
 */

export type WorkloadName = 'small' | 'python' | 'large';
export const WORKLOADS: readonly WorkloadName[] = ['small', 'python', 'large'];

/**
 * What the first run does: `startup` = the image's own entrypoint (reads ~1 % of the large image);
 * `model-load` = reads a whole model shard at start (issue 11): `cat` of shard 1 (cold read), `cat`
 * again (warm re-read), both timed inside the container, then `sha256sum` of it (untimed: the bytes
 * the reads left in the page cache are checked against the source; timing sha256sum would cap the
 * cold rate at coreutils' hashing speed, ~120-400 MB/s here). Only the large image has a model.
 */
export type WorkloadKind = 'startup' | 'model-load';
export const WORKLOAD_KINDS: readonly WorkloadKind[] = ['startup', 'model-load'];

/** Where the model shard read by `model-load` lives in the image. */
export const MODEL_SHARD = '/models/llm/model-00001-of-00003.safetensors';

export interface BuiltLayer extends LayerTar {
  /** Cache key of the content (changes when the layer would change). */
  key: string;
}

export interface Workload {
  name: WorkloadName;
  /** Cache key over everything that defines the image. */
  key: string;
  layers: BuiltLayer[];
  /** Directories whose overlay (top first) is the image rootfs (for profile recording). */
  rootfsLowers: string[];
  spec: ImageSpec;
  /** Substrings the first run must print (proves the bytes read were right). */
  expect: string[];
  uncompressedBytes: number;
  /** Bytes the entrypoint reads, when known. */
  touchedBytes?: number;
  /** `startup` unless this is a model-load variant. */
  kind?: WorkloadKind;
  /** Label of report rows: the image name, `+model-load` for that variant. */
  label?: string;
  /** Command that replaces the image's entrypoint for the first run. */
  runCmd?: string[];
  /** The model shard of the large image: its host copy and size. */
  modelShard?: { hostPath: string; bytes: number };
}

/** The command of the model-load first run (pure); prints `model-load cold-ns=N warm-ns=M`. */
export function modelLoadCmd(shard = MODEL_SHARD): string[] {
  return [
    '/bin/sh',
    '-c',
    `f=${shard}; a=$(date +%s%N); cat "$f" >/dev/null; b=$(date +%s%N); cat "$f" >/dev/null; c=$(date +%s%N); ` +
      'echo "model-load cold-ns=$((b-a)) warm-ns=$((c-b))"; sha256sum "$f"',
  ];
}

/** Cold and warm read times (ms) from the model-load output (pure). */
export function parseModelLoadOutput(out: string): { coldMs: number; warmMs: number } | undefined {
  const m = /model-load cold-ns=(\d+) warm-ns=(\d+)/.exec(out);
  return m ? { coldMs: Number(m[1]) / 1e6, warmMs: Number(m[2]) / 1e6 } : undefined;
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const b of createReadStream(path)) h.update(b as Buffer);
  return h.digest('hex');
}

/** The model-load variant of the large workload (same image, another first-run command). */
export async function modelLoadVariant(w: Workload): Promise<Workload> {
  if (!w.modelShard) {
    throw new StoreError(
      'E_CONFIG',
      `workload ${w.name} has no model shard (model-load needs the large image)`,
    );
  }
  const digest = await sha256File(w.modelShard.hostPath);
  return {
    ...w,
    kind: 'model-load',
    label: `${w.name}+model-load`,
    runCmd: modelLoadCmd(),
    expect: [`${digest}  ${MODEL_SHARD}`, 'model-load cold-ns='],
    touchedBytes: w.modelShard.bytes,
  };
}

export interface WorkloadParams {
  workDir: string;
  scale: number;
  seed: number;
  suite: string;
  mirror?: string;
}

const hash = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 16);

async function cachedTar(
  dir: string,
  name: string,
  key: string,
  make: (out: string) => Promise<LayerTar>,
): Promise<BuiltLayer> {
  await mkdir(dir, { recursive: true });
  const meta = join(dir, `${name}.json`);
  const prev = await readFile(meta, 'utf8').catch(() => '');
  if (prev) {
    const l = JSON.parse(prev) as BuiltLayer;
    const st = await stat(l.path).catch(() => undefined);
    if (l.key === key && st?.size === l.size) return l;
  }
  say(`tar layer ${name}`);
  const t = await make(join(dir, `${name}.tar`));
  const l: BuiltLayer = { ...t, key };
  await writeFile(meta, JSON.stringify(l));
  return l;
}

export async function buildWorkloads(names: readonly WorkloadName[], p: WorkloadParams): Promise<Workload[]> {
  const rootfs = join(p.workDir, 'rootfs');
  const tars = join(p.workDir, 'layers');
  await mkdir(rootfs, { recursive: true });
  const mirror = p.mirror ?? (await aptMirror());
  const minbase = join(rootfs, `minbase-${p.suite}`);
  await buildMinbase(minbase, { suite: p.suite, mirror });
  const minKey = hash(await readFile(`${minbase}.json`, 'utf8'));
  const baseLayer = await cachedTar(tars, `minbase-${p.suite}`, minKey, (out) =>
    createLayerTar({ root: minbase, out }),
  );
  const debianVersion = (await readFile(join(minbase, 'etc/debian_version'), 'utf8')).trim();
  const osRelease = await readFile(join(minbase, 'usr/lib/os-release'));
  const env = [DEFAULT_PATH];
  const out: Workload[] = [];

  const needPython = names.includes('python') || names.includes('large');
  let pyUpper = '';
  let pyLayer: BuiltLayer | undefined;
  if (needPython) {
    pyUpper = join(rootfs, `python-${p.suite}-upper`);
    await buildPackageLayer(p.workDir, pyUpper, [minbase], { packages: ['python3'] });
    const pyKey = hash(minKey + (await readFile(`${pyUpper}.json`, 'utf8')));
    pyLayer = await cachedTar(tars, `python-${p.suite}`, pyKey, (o) =>
      createLayerTar({ root: pyUpper, out: o, overlayUpper: true }),
    );
  }

  for (const name of names) {
    if (name === 'small') {
      out.push({
        name,
        key: hash(`small:${baseLayer.key}:v1`),
        layers: [baseLayer],
        rootfsLowers: [minbase],
        spec: {
          cmd: [
            '/bin/sh',
            '-c',
            'cat /etc/debian_version; ls /usr/bin >/dev/null; apt-get --version >/dev/null; echo small-ok',
          ],
          env,
        },
        expect: [debianVersion, 'small-ok'],
        uncompressedBytes: baseLayer.size,
      });
    } else if (name === 'python') {
      const want = createHash('sha256').update(osRelease).digest('hex');
      out.push({
        name,
        key: hash(`python:${baseLayer.key}:${pyLayer!.key}:v1`),
        layers: [baseLayer, pyLayer!],
        rootfsLowers: [pyUpper, minbase],
        spec: {
          cmd: [
            'python3',
            '-c',
            "import hashlib, json; d = open('/usr/lib/os-release', 'rb').read(); print('python-ok', hashlib.sha256(d).hexdigest())",
          ],
          env: [...env, 'PYTHONDONTWRITEBYTECODE=1'],
        },
        expect: [`python-ok ${want}`],
        uncompressedBytes: baseLayer.size + pyLayer!.size,
      });
    } else if (name === 'large') {
      const modelDir = join(p.workDir, 'modeldata', `scale${p.scale}-seed${p.seed}`);
      await mkdir(join(p.workDir, 'modeldata'), { recursive: true });
      say(`model payload scale=${p.scale} seed=${p.seed}`);
      const md = await generateModelData(modelDir, { scale: p.scale, seed: p.seed });
      const mKey = hash(`${md.expectedOutput}:${md.totalBytes}:${md.fileCount}`);
      const modelLayer = await cachedTar(tars, `model-scale${p.scale}-seed${p.seed}`, mKey, (o) =>
        createLayerTar({ root: modelDir, out: o }),
      );
      out.push({
        name,
        key: hash(`large:${baseLayer.key}:${pyLayer!.key}:${modelLayer.key}:v1`),
        layers: [baseLayer, pyLayer!, modelLayer],
        rootfsLowers: [modelDir, pyUpper, minbase],
        spec: { cmd: md.cmd, env: [...env, 'PYTHONDONTWRITEBYTECODE=1'], workingDir: '/app' },
        expect: [md.expectedOutput],
        uncompressedBytes: baseLayer.size + pyLayer!.size + modelLayer.size,
        touchedBytes: md.touchedBytes,
        modelShard: {
          hostPath: join(modelDir, MODEL_SHARD.slice(1)),
          bytes: (await stat(join(modelDir, MODEL_SHARD.slice(1)))).size,
        },
      });
    } else {
      throw new StoreError('E_CONFIG', `unknown workload ${String(name)}`);
    }
  }
  return out;
}
