import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { StoreError } from '../util/errors.js';
import { CODEC_WORKER_SOURCE } from './codec-worker.js';

/** Messages sent to a codec worker (see codec-worker.ts for the protocol). */
export type CodecRequest =
  | {
      op: 'decode';
      codec: 'gzip' | 'zstd';
      src: ArrayBuffer[];
      innerOffset: number;
      size: number;
      digest: string;
    }
  | {
      op: 'decodeMany';
      codec: 'gzip' | 'zstd';
      src: ArrayBuffer[];
      chunks: Array<{ innerOffset: number; size: number; digest: string }>;
    }
  | { op: 'zeros'; size: number; digest: string }
  | { op: 'sha256'; src: ArrayBuffer[] };

/** Outcome for one chunk of a decodeMany task. */
export type ChunkReply =
  | { ok: true; data: ArrayBuffer; byteOffset: number; length: number }
  | { ok: false; kind: 'decompress' | 'truncated' | 'mismatch'; message: string; actual?: string };

export type CodecReply =
  | {
      id: number;
      ok: true;
      data?: ArrayBuffer;
      byteOffset?: number;
      length?: number;
      digest?: string;
      results?: ChunkReply[];
    }
  | {
      id: number;
      ok: false;
      kind: 'decompress' | 'truncated' | 'mismatch';
      message: string;
      actual?: string;
    };

interface Task {
  id: number;
  req: CodecRequest;
  transfer: ArrayBuffer[];
  resolve: (r: CodecReply) => void;
  reject: (e: Error) => void;
}

interface Slot {
  worker: Worker;
  inflight: Map<number, Task>;
}

/** Tasks queued per worker so it never idles waiting for the next message. */
const PER_WORKER = 2;

const require = createRequire(import.meta.url);

/**
 * A small, lazily started worker_threads pool for decompression and hashing. Workers are unref'd
 * while idle (never keep the process alive) and ref'd while they own tasks, so an awaited decode
 * still completes in a process with nothing else to do.
 */
export class CodecPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Task[] = [];
  private nextId = 1;
  private zstdBinding: string | undefined;

  constructor(private size: number) {
    CodecPool.checkSize(size);
  }

  private static checkSize(n: number): void {
    if (!Number.isInteger(n) || n < 1 || n > 64) {
      throw new StoreError('E_CONFIG', `codec pool size must be an integer in [1, 64], got ${n}`);
    }
  }

  get poolSize(): number {
    return this.size;
  }

  /** Number of live worker threads (0 until the first task). */
  get liveWorkers(): number {
    return this.slots.length;
  }

  resize(n: number): void {
    CodecPool.checkSize(n);
    this.size = n;
    // Shrink by retiring idle workers beyond the new size; busy ones go when they drain.
    for (let i = this.slots.length - 1; i >= 0 && this.slots.length > n; i--) {
      const s = this.slots[i]!;
      if (s.inflight.size === 0) {
        this.slots.splice(i, 1);
        void s.worker.terminate();
      }
    }
    this.pump();
  }

  run(req: CodecRequest, transfer: ArrayBuffer[] = []): Promise<CodecReply> {
    return new Promise<CodecReply>((resolve, reject) => {
      this.queue.push({ id: this.nextId++, req, transfer, resolve, reject });
      this.pump();
    });
  }

  private spawn(): Slot {
    this.zstdBinding ??= require.resolve('zstd-napi/binding.js');
    const worker = new Worker(CODEC_WORKER_SOURCE, {
      eval: true,
      workerData: { zstdBinding: this.zstdBinding },
      name: 'stargz-codec',
    });
    worker.unref();
    const slot: Slot = { worker, inflight: new Map() };
    worker.on('message', (reply: CodecReply) => {
      const task = slot.inflight.get(reply.id);
      if (!task) return;
      slot.inflight.delete(reply.id);
      if (slot.inflight.size === 0) worker.unref();
      task.resolve(reply);
      this.afterTask(slot);
    });
    const die = (err: Error): void => {
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1);
      for (const t of slot.inflight.values()) {
        // A crash or OOM says nothing about the data: an I/O-class failure, retryable.
        t.reject(
          new StoreError('E_IO', `codec worker failed: ${err.message}`, { op: t.req.op }, { cause: err }),
        );
      }
      slot.inflight.clear();
      this.pump();
    };
    worker.on('error', die);
    worker.on('exit', (code) => die(new Error(`worker exited with code ${code}`)));
    this.slots.push(slot);
    return slot;
  }

  private afterTask(slot: Slot): void {
    if (this.slots.length > this.size && slot.inflight.size === 0) {
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1);
      void slot.worker.terminate();
    }
    this.pump();
  }

  private pump(): void {
    while (this.queue.length > 0) {
      let best: Slot | undefined;
      for (const s of this.slots) if (!best || s.inflight.size < best.inflight.size) best = s;
      if ((!best || best.inflight.size > 0) && this.slots.length < this.size) best = this.spawn();
      if (!best || best.inflight.size >= PER_WORKER) return;
      const task = this.queue.shift()!;
      if (best.inflight.size === 0) best.worker.ref();
      best.inflight.set(task.id, task);
      try {
        best.worker.postMessage({ id: task.id, ...task.req }, task.transfer);
      } catch (err) {
        best.inflight.delete(task.id);
        if (best.inflight.size === 0) best.worker.unref();
        task.reject(
          new StoreError(
            'E_IO',
            `cannot post to codec worker: ${(err as Error).message}`,
            { op: task.req.op },
            { cause: err },
          ),
        );
      }
    }
  }

  /** Stop every worker; queued and in-flight tasks fail with E_ABORTED. */
  async terminate(): Promise<void> {
    const slots = this.slots.splice(0);
    const queued = this.queue.splice(0);
    for (const t of queued) t.reject(new StoreError('E_ABORTED', 'codec pool terminated'));
    await Promise.all(
      slots.map(async (s) => {
        const tasks = [...s.inflight.values()];
        s.inflight.clear();
        s.worker.removeAllListeners('exit');
        s.worker.removeAllListeners('error');
        s.worker.on('error', () => {});
        await s.worker.terminate();
        for (const t of tasks) t.reject(new StoreError('E_ABORTED', 'codec pool terminated'));
      }),
    );
  }
}
