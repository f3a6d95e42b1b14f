import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { addProblem, checkChunkCache, type CheckOptions, type CheckReport } from '../cache/check.js';
import type { LayerIndex } from '../format/model.js';
import { openLayer } from '../format/open-layer.js';
import { StoreError } from '../util/errors.js';
import { OfflineBlob, TailReader } from './blob-source.js';
import { MetaStore } from './meta-store.js';
import type { LayerRecord } from './record.js';
import { rootLayout } from '../util/root-layout.js';

/**
 * `stargz-store check` over a whole `--root` (store stopped): the chunk cache (cache/check.ts), every
 * resolution record under `metadata/layers`, every saved TOC under `metadata/tocs` (parsed and
 * verified against the TOC digest of each record that uses it, with no network), the layer states
 * under `layer-state`, and leftovers (temp files, files nobody refers to). `repair` deletes each bad
 * item; everything deleted is re-established from the registry on next use.
 */

export interface StoreCheckResult extends CheckReport {
  root: string;
  repair: boolean;
  /** No problem left (with --repair: every problem was removed). */
  clean: boolean;
}

const DIGEST = /^sha256:[0-9a-f]{64}$/;

function isRecord(r: unknown, ref: string | undefined): r is LayerRecord {
  const x = r as Partial<LayerRecord> | null;
  return (
    typeof x === 'object' &&
    x !== null &&
    x.version === 1 &&
    typeof x.ref === 'string' &&
    (ref === undefined || x.ref === ref) &&
    typeof x.digest === 'string' &&
    DIGEST.test(x.digest) &&
    typeof x.blobDigest === 'string' &&
    DIGEST.test(x.blobDigest) &&
    Number.isSafeInteger(x.blobSize) &&
    (x.blobSize ?? 0) > 0 &&
    typeof x.tocDigest === 'string' &&
    DIGEST.test(x.tocDigest) &&
    (x.matchedBy === 'blob' || x.matchedBy === 'toc')
  );
}

function tocMatches(index: LayerIndex, expected: string): boolean {
  return (
    expected === index.tocDigest || expected === index.tocJsonDigest || expected === index.manifestChecksum
  );
}

async function names(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).sort();
  } catch {
    return [];
  }
}

export async function checkStoreRoot(root: string, opts: CheckOptions): Promise<StoreCheckResult> {
  const report: CheckReport = { problems: [], counts: {} };
  await checkChunkCache(root, report, opts);

  // Resolution records: the file name is sha256("<ref>\n<digest>"), the content must say the same.
  const layersDir = rootLayout(root).metadataLayers;
  const records: LayerRecord[] = [];
  for (const name of await names(layersDir)) {
    const path = join(layersDir, name);
    if (!name.endsWith('.json')) {
      if (name.endsWith('.tmp') && opts.running === true) continue;
      await addProblem(report, opts, {
        kind: name.endsWith('.tmp') ? 'temp-file' : 'stray-file',
        path,
        detail: name.endsWith('.tmp')
          ? 'temp file left by an interrupted record write'
          : 'not a layer record',
      });
      continue;
    }
    let why: string | undefined;
    try {
      const r = JSON.parse(await readFile(path, 'utf8')) as unknown;
      if (!isRecord(r, undefined)) why = 'missing or malformed fields';
      else {
        const key = createHash('sha256').update(`${r.ref}\n${r.digest}`).digest('hex');
        if (`${key}.json` !== name) why = `file name does not match its ref and digest (${r.digest})`;
        else records.push(r);
      }
    } catch (err) {
      why = err instanceof SyntaxError ? 'not valid JSON' : (err as Error).message;
    }
    if (why !== undefined) {
      await addProblem(report, opts, { kind: 'record-invalid', path, detail: `layer record: ${why}` });
    }
  }
  report.counts.records = records.length;

  // Saved TOCs: each must verify against every record that points at its blob.
  const meta = new MetaStore(root);
  const tocsDir = rootLayout(root).metadataTocs;
  const byBlob = new Map<string, LayerRecord[]>();
  for (const r of records) byBlob.set(r.blobDigest, [...(byBlob.get(r.blobDigest) ?? []), r]);
  let tocs = 0;
  for (const name of await names(tocsDir)) {
    const path = join(tocsDir, name);
    const m = /^([0-9a-f]{64})\.tail$/.exec(name);
    if (m === null) {
      if (name.endsWith('.tmp') && opts.running === true) continue;
      await addProblem(report, opts, {
        kind: name.endsWith('.tmp') ? 'temp-file' : 'stray-file',
        path,
        detail: name.endsWith('.tmp') ? 'temp file left by an interrupted TOC write' : 'not a saved TOC',
      });
      continue;
    }
    const blobDigest = `sha256:${m[1]}`;
    const users = byBlob.get(blobDigest) ?? [];
    if (users.length === 0) {
      await addProblem(report, opts, {
        kind: 'toc-orphan',
        path,
        detail: `saved TOC of ${blobDigest} is used by no layer record`,
      });
      continue;
    }
    let why: string | undefined;
    const tail = await meta.getTocTail(blobDigest, users[0]!.blobSize).catch((err: unknown) => {
      why = (err as Error).message;
      return undefined;
    });
    if (tail === undefined) why ??= 'header does not match the blob (size, digest or length)';
    else {
      for (const r of users) {
        try {
          const index = await openLayer(new TailReader(new OfflineBlob(r.blobSize), tail.start, tail.bytes), {
            expectedTocDigest: r.tocDigest,
            // the first read takes exactly the saved bytes: nothing before them is needed
            tailGuessBytes: tail.bytes.length,
          });
          if (!tocMatches(index, r.tocDigest)) why = `TOC does not match ${r.tocDigest}`;
        } catch (err) {
          why = `${(err as StoreError).code ?? 'error'}: ${(err as Error).message}`;
        }
        if (why !== undefined) break;
      }
    }
    if (why !== undefined) {
      await addProblem(report, opts, {
        kind: 'toc-invalid',
        path,
        detail: `saved TOC of ${blobDigest}: ${why}`,
      });
    } else tocs++;
  }
  report.counts.tocs = tocs;

  // Per-layer engine state (fully verified, uncompressed size).
  const stateDir = rootLayout(root).layerState;
  let states = 0;
  for (const name of await names(stateDir)) {
    const path = join(stateDir, name);
    if (!name.endsWith('.json')) {
      if (name.endsWith('.tmp') && opts.running === true) continue;
      await addProblem(report, opts, {
        kind: name.endsWith('.tmp') ? 'temp-file' : 'stray-file',
        path,
        detail: name.endsWith('.tmp') ? 'temp file left by an interrupted state write' : 'not a layer state',
      });
      continue;
    }
    let ok = false;
    try {
      const s = JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
      ok =
        typeof s.layerKey === 'string' &&
        typeof s.diffID === 'string' &&
        DIGEST.test(s.diffID) &&
        typeof s.fullyVerified === 'boolean';
    } catch {
      ok = false;
    }
    if (ok) states++;
    else {
      await addProblem(report, opts, {
        kind: 'layer-state-invalid',
        path,
        detail: 'layer state is not valid JSON with layerKey, diffID and fullyVerified',
      });
    }
  }
  report.counts.layerStates = states;

  // Pinned image sets: a damaged pins.json loses the set (the store starts with none).
  const pins = rootLayout(root).pins;
  const pinsText = await readFile(pins, 'utf8').catch(() => undefined);
  if (pinsText !== undefined) {
    let ok = false;
    try {
      ok = Array.isArray((JSON.parse(pinsText) as { pins?: unknown }).pins);
    } catch {
      ok = false;
    }
    if (!ok) {
      await addProblem(report, opts, {
        kind: 'pin-invalid',
        path: pins,
        detail: 'pins.json is not valid JSON with a pins array: re-add the pinned images after repair',
      });
    }
  }
  for (const name of await names(root)) {
    if (/^pins\.json\.[0-9a-f]+\.tmp$/.test(name) && opts.running !== true) {
      await addProblem(report, opts, {
        kind: 'temp-file',
        path: join(root, name),
        detail: 'temp file left by an interrupted pins.json write',
      });
    }
  }

  const clean = report.problems.every((p) => p.repaired);
  return { root, repair: opts.repair, clean, ...report };
}
