import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../util/errors.js';
import type { LayerRecord } from './record.js';

/**
 * Per-(ref, digest) resolution records and the manifests/configs they came from, under
 * `<root>/metadata/`. Writes go through a temp file + rename so a crash never leaves half a record.
 * Nothing here is trusted blindly: the TOC is re-verified against `tocDigest` on every open.
 */
export class MetaStore {
  private readonly layersDir: string;
  private readonly blobsDir: string;
  private ready: Promise<void> | undefined;

  constructor(readonly root: string) {
    this.layersDir = join(root, 'metadata', 'layers');
    this.blobsDir = join(root, 'metadata', 'blobs', 'sha256');
  }

  private init(): Promise<void> {
    this.ready ??= (async () => {
      await mkdir(this.layersDir, { recursive: true, mode: 0o700 });
      await mkdir(this.blobsDir, { recursive: true, mode: 0o700 });
    })();
    return this.ready;
  }

  private recordPath(ref: string, digest: string): string {
    const key = createHash('sha256').update(`${ref}\n${digest}`).digest('hex');
    return join(this.layersDir, `${key}.json`);
  }

  async getLayer(ref: string, digest: string): Promise<LayerRecord | undefined> {
    let text: string;
    try {
      text = await readFile(this.recordPath(ref, digest), 'utf8');
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

  async putLayer(r: LayerRecord): Promise<void> {
    await this.init();
    await this.atomicWrite(this.recordPath(r.ref, r.digest), JSON.stringify(r, null, 1) + '\n');
  }

  /** Store a manifest or config by its digest (content-addressed; verified before writing). */
  async putBlob(digest: string, bytes: Buffer): Promise<void> {
    const [alg, hex] = digest.split(':');
    if (alg !== 'sha256' || !hex) return;
    const actual = createHash('sha256').update(bytes).digest('hex');
    if (actual !== hex) return;
    await this.init();
    await this.atomicWrite(join(this.blobsDir, hex), bytes);
  }

  async getBlob(digest: string): Promise<Buffer | undefined> {
    const [alg, hex] = digest.split(':');
    if (alg !== 'sha256' || !hex || !/^[a-f0-9]{64}$/.test(hex)) return undefined;
    try {
      const bytes = await readFile(join(this.blobsDir, hex));
      return createHash('sha256').update(bytes).digest('hex') === hex ? bytes : undefined;
    } catch {
      return undefined;
    }
  }

  private async atomicWrite(path: string, data: string | Buffer): Promise<void> {
    const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      await writeFile(tmp, data, { mode: 0o600 });
      await rename(tmp, path);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw new StoreError('E_IO', `cannot write ${path}: ${(err as Error).message}`, { path });
    }
  }
}
