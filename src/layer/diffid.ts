import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { StoreError } from '../util/errors.js';
import type { Compression } from '../format/model.js';

/*
 * The worker decompresses the layer's compressed bytes as one stream and hashes the output, so
 * neither inflating nor sha256 of a multi-GB layer runs on the main thread (the FUSE server).
 * Inline source (eval) so it works both from the TypeScript sources under vitest and from dist/.
 * gzip: Node's gunzip continues across concatenated members (all eStargz members, the TOC member
 * and the empty footer member). zstd: libzstd's streaming decoder skips skippable frames (TOC,
 * tar-split, footer), so the output is exactly the data frames: the DiffID stream of both
 * zstd:chunked flavours.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const crypto = require('node:crypto');
const zlib = require('node:zlib');
const hash = crypto.createHash('sha256');
let size = 0;
let failed = false;
const dec = workerData.compression === 'gzip'
  ? zlib.createGunzip({ chunkSize: 256 * 1024 })
  : new (require(workerData.zstdPath).DecompressStream)();
dec.on('data', (d) => { hash.update(d); size += d.length; });
dec.on('error', (e) => { failed = true; parentPort.postMessage({ t: 'error', message: String(e && e.message || e) }); });
dec.on('end', () => { if (!failed) parentPort.postMessage({ t: 'done', digest: 'sha256:' + hash.digest('hex'), size }); });
parentPort.on('message', (m) => {
  if (failed) return;
  // the slot is reused by the main thread after the ack, i.e. once the decoder consumed it
  if (m.t === 'data') dec.write(Buffer.from(workerData.shared, m.slot * workerData.piece, m.len), () => parentPort.postMessage({ t: 'ack', id: m.id }));
  else if (m.t === 'end') dec.end();
});
`;

const zstdPath = createRequire(import.meta.url).resolve('zstd-napi');
/** Bytes per piece handed to the worker. */
const PIECE = 512 * 1024;
/** Few pieces queued: a pause for on-demand work then takes effect within ~1 MiB of work. */
const MAX_QUEUED = 2;
/**
 * Pieces travel through a small shared ring (no allocation per piece: fresh ArrayBuffers for
 * every piece of a multi-GB layer would keep V8 busy with external-memory GCs).
 */
const SLOTS = MAX_QUEUED + 1;

interface WorkerMessage {
  t: 'ack' | 'done' | 'error';
  id?: number;
  digest?: string;
  size?: number;
  message?: string;
}

/** DiffID worker threads currently alive. */
let live = 0;

/**
 * sha256 of the decompressed stream of a layer's compressed bytes, fed in order. The worker thread
 * is started by the first write (or end()), not by the constructor, so a pass still waiting for
 * its turn holds no thread.
 */
export class StreamDigest {
  /** DiffID worker threads alive in this process (status and tests). */
  static get liveWorkers(): number {
    return live;
  }

  private worker: Worker | undefined;
  private nextId = 0;
  private readonly acks = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  private result: Promise<{ digest: string; size: number }> | undefined;
  private failure: Error | undefined;
  private queued: Array<Promise<void>> = [];
  private ring: SharedArrayBuffer | undefined;
  private destroyed = false;

  constructor(private readonly compression: Compression) {}

  private start(): { worker: Worker; ring: SharedArrayBuffer } {
    if (this.worker !== undefined && this.ring !== undefined) return { worker: this.worker, ring: this.ring };
    if (this.destroyed) throw new StoreError('E_ABORTED', 'diffid stream already closed');
    const ring = new SharedArrayBuffer(PIECE * SLOTS);
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { compression: this.compression, zstdPath, shared: ring, piece: PIECE },
    });
    live++;
    let exited = false;
    const onExit = (): void => {
      if (exited) return;
      exited = true;
      live--;
    };
    this.worker = worker;
    this.ring = ring;
    this.result = new Promise((resolve, reject) => {
      worker.on('message', (m: WorkerMessage) => {
        if (m.t === 'ack' && m.id !== undefined) {
          this.acks.get(m.id)?.resolve();
          this.acks.delete(m.id);
        } else if (m.t === 'done') {
          resolve({ digest: m.digest!, size: m.size! });
        } else if (m.t === 'error') {
          this.fail(new StoreError('E_DECOMPRESS', `layer stream does not decompress: ${m.message}`), reject);
        }
      });
      worker.on('error', (err) => this.fail(err, reject));
      worker.on('exit', () => {
        onExit();
        this.fail(new StoreError('E_IO', 'diffid worker exited'), reject);
      });
    });
    this.result.catch(() => undefined);
    return { worker, ring };
  }

  private fail(err: Error, reject: (e: Error) => void): void {
    if (this.failure !== undefined) return;
    this.failure = err;
    for (const a of this.acks.values()) a.reject(err);
    this.acks.clear();
    reject(err);
  }

  /**
   * Feed the next compressed bytes. Resolves once at most MAX_QUEUED pieces are still queued in
   * the worker (backpressure: memory stays bounded however fast the network is). `beforePiece`
   * runs before each piece is posted (the caller uses it to pause for on-demand work).
   */
  async write(buf: Buffer, beforePiece?: () => Promise<void>): Promise<void> {
    for (let off = 0; off < buf.length; off += PIECE) {
      if (beforePiece !== undefined) await beforePiece();
      if (this.failure !== undefined) throw this.failure;
      const { worker, ring } = this.start();
      const piece = buf.subarray(off, Math.min(buf.length, off + PIECE));
      const id = this.nextId++;
      const acked = new Promise<void>((resolve, reject) => this.acks.set(id, { resolve, reject }));
      acked.catch(() => undefined);
      this.queued.push(acked);
      // At most SLOTS pieces are unacknowledged here (see the wait below), so slot id % SLOTS
      // was acknowledged (consumed) before it is overwritten.
      const slot = id % SLOTS;
      new Uint8Array(ring, slot * PIECE, piece.length).set(piece);
      worker.postMessage({ t: 'data', id, slot, len: piece.length });
      while (this.queued.length > MAX_QUEUED) await this.queued.shift();
    }
  }

  /** Finish the stream: the digest and length of everything decompressed. */
  async end(): Promise<{ digest: string; size: number }> {
    if (this.failure !== undefined) throw this.failure;
    const { worker } = this.start();
    worker.postMessage({ t: 'end' });
    try {
      return await this.result!;
    } finally {
      await this.destroy();
    }
  }

  async destroy(): Promise<void> {
    this.destroyed = true;
    await this.worker?.terminate();
  }
}
