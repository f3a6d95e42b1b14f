import { createHash } from 'node:crypto';
import { access, mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../util/atomic-file.js';
import { StoreError } from '../util/errors.js';
import type { LayerRecord } from './record.js';
import { rootLayout } from '../util/root-layout.js';

/**
 * Per-(ref, digest) resolution records and, per blob, the verified TOC bytes (the blob's tail from
 * the TOC to the end: TOC, footer and whatever lies between), under `<root>/metadata/`. With both, a
 * restarted store re-opens a layer without the registry. Writes go through a temp file + rename so a
 * crash never leaves half a file. Nothing here is trusted blindly: the format reader re-verifies the
 * saved TOC against the record's `tocDigest` on every open, and a bad file is just ignored.
 */

/** The saved end of a blob: bytes [start, blobSize). */
export interface TocTail {
  blobDigest: string;
  blobSize: number;
  start: number;
  bytes: Buffer;
}

/** Largest tail we keep (the format reader's TOC limit plus room for tar-split and framing). */
const MAX_TAIL_BYTES = 96 * 1024 * 1024;
export class MetaStore {
  private readonly layersDir: string;
  private readonly tocsDir: string;
  private ready: Promise<void> | undefined;
  /**
   * Writes not finished yet, per file. Callers need not wait for a write (the resolver answers
   * first): a later write of the same file runs after it and a read of it waits for it, so this
   * process always reads its last write and an older write never lands over a newer one.
   */
  private readonly writing = new Map<string, Promise<void>>();

  constructor(readonly root: string) {
    const layout = rootLayout(root);
    this.layersDir = layout.metadataLayers;
    this.tocsDir = layout.metadataTocs;
  }

  private init(): Promise<void> {
    const p = (this.ready ??= (async () => {
      await mkdir(this.layersDir, { recursive: true, mode: 0o700 });
      await mkdir(this.tocsDir, { recursive: true, mode: 0o700 });
    })());
    // a failed mkdir (disk full, permissions) is retried by the next write
    p.catch(() => {
      if (this.ready === p) this.ready = undefined;
    });
    return p;
  }

  private recordPath(ref: string, digest: string): string {
    const key = createHash('sha256').update(`${ref}\n${digest}`).digest('hex');
    return join(this.layersDir, `${key}.json`);
  }

  async getLayer(ref: string, digest: string): Promise<LayerRecord | undefined> {
    const path = this.recordPath(ref, digest);
    await this.written(path);
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new StoreError('E_IO', `cannot read layer record: ${(err as Error).message}`, { ref, digest });
    }
    try {
      const r = JSON.parse(text) as LayerRecord;
      if (r.version !== 1 || r.ref !== ref || r.digest !== digest) return undefined;
      return r;
    } catch {
      return undefined; // a damaged record is just re-resolved from the registry
    }
  }

  putLayer(r: LayerRecord): Promise<void> {
    return this.atomicWrite(this.recordPath(r.ref, r.digest), JSON.stringify(r, null, 1) + '\n');
  }

  private tailPath(blobDigest: string): string | undefined {
    const m = /^sha256:([a-f0-9]{64})$/.exec(blobDigest);
    return m ? join(this.tocsDir, `${m[1]}.tail`) : undefined;
  }

  /** Save a blob's verified tail: one JSON header line, then the raw bytes. */
  async putTocTail(t: TocTail): Promise<void> {
    const path = this.tailPath(t.blobDigest);
    if (!path || t.bytes.length > MAX_TAIL_BYTES || t.start + t.bytes.length !== t.blobSize) return;
    const header = JSON.stringify({
      version: 1,
      blobDigest: t.blobDigest,
      blobSize: t.blobSize,
      start: t.start,
    });
    await this.atomicWrite(path, Buffer.concat([Buffer.from(header + '\n'), t.bytes]));
  }

  /** Is a tail of this blob saved (or being saved)? Cheap: no read of it. */
  async hasTocTail(blobDigest: string): Promise<boolean> {
    const path = this.tailPath(blobDigest);
    if (!path) return false;
    await this.written(path);
    return await access(path).then(
      () => true,
      () => false,
    );
  }

  /** The saved tail of a blob, or undefined when absent or not self-consistent. */
  async getTocTail(blobDigest: string, blobSize: number): Promise<TocTail | undefined> {
    const path = this.tailPath(blobDigest);
    if (!path) return undefined;
    await this.written(path);
    let raw: Buffer;
    try {
      raw = await readFile(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new StoreError('E_IO', `cannot read saved TOC: ${(err as Error).message}`, {
        digest: blobDigest,
      });
    }
    const nl = raw.indexOf(0x0a);
    if (nl < 0 || nl > 4096) return undefined;
    try {
      const h = JSON.parse(raw.subarray(0, nl).toString('utf8')) as Record<string, unknown>;
      const bytes = raw.subarray(nl + 1);
      if (
        h.version !== 1 ||
        h.blobDigest !== blobDigest ||
        h.blobSize !== blobSize ||
        typeof h.start !== 'number' ||
        h.start + bytes.length !== blobSize
      ) {
        return undefined;
      }
      return { blobDigest, blobSize, start: h.start, bytes };
    } catch {
      return undefined;
    }
  }

  /** Resolves once every write started so far has finished (store shutdown). */
  async idle(): Promise<void> {
    while (this.writing.size > 0) await Promise.all([...this.writing.values()].map((p) => p.catch(() => {})));
  }

  /** Resolves when the writes of `path` started so far have finished (either way). */
  private async written(path: string): Promise<void> {
    await this.writing.get(path)?.catch(() => {});
  }

  private atomicWrite(path: string, data: string | Buffer): Promise<void> {
    const before = this.written(path);
    const p = (async () => {
      await before;
      try {
        await this.init();
        await writeFileAtomic(path, data);
      } catch (err) {
        throw new StoreError('E_IO', `cannot write ${path}: ${(err as Error).message}`, { path });
      }
    })();
    this.writing.set(path, p);
    const done = (): void => {
      if (this.writing.get(path) === p) this.writing.delete(path);
    };
    p.then(done, done);
    return p;
  }
}
