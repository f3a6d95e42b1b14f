import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A userspace "network link" in front of the registry: a TCP proxy that adds a one-way delay in each
 * direction and limits the rate of each direction to a shared link capacity (all connections share it,
 * like one access link). This kernel has no netem, so latency has to come from userspace.
 *
 * Model per direction: a chunk offered at t starts transmitting when the link is free
 * (max(t, busyUntil)), takes len/rate to serialise, then arrives `delay` later. New connections pay one
 * extra round trip before the first byte is forwarded (the TCP handshake over the emulated link).
 */

export interface LinkShape {
  /** Link capacity in bytes per second per direction; 0 or undefined = unlimited. */
  rateBytesPerSec?: number;
  /** One-way propagation delay in ms (RTT = 2 x delay). */
  delayMs: number;
}

export function mbitToBytesPerSec(mbit: number): number {
  return (mbit * 1e6) / 8;
}

/** Serialisation + propagation of one direction (pure; the clock is passed in). */
export class LinkModel {
  private busyUntil = -Infinity;
  constructor(readonly shape: LinkShape) {}

  /** Arrival time at the far end of `len` bytes offered at `now` (ms). */
  schedule(len: number, now: number): number {
    const start = Math.max(now, this.busyUntil);
    const rate = this.shape.rateBytesPerSec ?? 0;
    const tx = rate > 0 ? (len / rate) * 1000 : 0;
    this.busyUntil = start + tx;
    return this.busyUntil + this.shape.delayMs;
  }

  get passthrough(): boolean {
    return !(this.shape.rateBytesPerSec! > 0) && this.shape.delayMs <= 0;
  }
}

interface Pending {
  at: number;
  run: () => void;
}

/** FIFO of scheduled deliveries for one direction; arrival times are monotonic, so one timer suffices. */
class DelayLine {
  private readonly q: Pending[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;
  constructor(
    readonly model: LinkModel,
    private readonly now: () => number = () => performance.now(),
  ) {}

  push(len: number, run: () => void): void {
    if (this.model.passthrough) {
      run();
      return;
    }
    this.q.push({ at: this.model.schedule(len, this.now()), run });
    this.arm();
  }

  private arm(): void {
    if (this.timer || this.head >= this.q.length) return;
    const wait = Math.max(0, this.q[this.head]!.at - this.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.pump();
    }, wait);
  }

  private pump(): void {
    const t = this.now();
    // deliver everything due (sub-ms slack: timers fire late, never early on purpose)
    while (this.head < this.q.length && this.q[this.head]!.at <= t + 0.25) {
      const p = this.q[this.head++]!;
      p.run();
    }
    if (this.head > 1024 && this.head * 2 > this.q.length) {
      this.q.splice(0, this.head);
      this.head = 0;
    }
    this.arm();
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

export interface ProxyStats {
  connections: number;
  bytesToTarget: number;
  bytesFromTarget: number;
}

export interface ShapingProxy {
  readonly host: string;
  readonly port: number;
  readonly stats: ProxyStats;
  close(): Promise<void>;
}

export interface ProxyOptions {
  listenHost?: string;
  listenPort?: number;
  targetHost: string;
  targetPort: number;
  shape: LinkShape;
}

export async function startShapingProxy(opts: ProxyOptions): Promise<ShapingProxy> {
  const up = new DelayLine(new LinkModel(opts.shape));
  const down = new DelayLine(new LinkModel(opts.shape));
  const stats: ProxyStats = { connections: 0, bytesToTarget: 0, bytesFromTarget: 0 };
  const sockets = new Set<Socket>();
  const rate = opts.shape.rateBytesPerSec ?? 0;
  // Enough in flight to fill the emulated pipe twice over, never less than 1 MiB.
  const bdp = rate > 0 ? (rate * 2 * opts.shape.delayMs) / 1000 : 64 * 1024 * 1024;
  const cap = Math.max(1024 * 1024, Math.min(64 * 1024 * 1024, 2 * bdp));
  const handshakeMs = 2 * opts.shape.delayMs;

  // Half-open sockets: a FIN must travel the emulated link behind the data queued before it, so
  // neither side may be ended or destroyed early by Node (allowHalfOpen) or by us.
  const server: Server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (client) => {
    stats.connections++;
    sockets.add(client);
    const target = connect({
      host: opts.targetHost,
      port: opts.targetPort,
      allowHalfOpen: true,
      noDelay: true,
    });
    target.pause();
    sockets.add(target);
    client.setNoDelay(true);
    let failed = false;
    const fail = () => {
      if (failed) return;
      failed = true;
      client.destroy();
      target.destroy();
    };
    client.on('error', fail);
    target.on('error', fail);
    // the client is gone for good: nothing can be delivered to it any more
    client.on('close', () => {
      sockets.delete(client);
      target.destroy();
    });
    target.on('close', () => sockets.delete(target));
    pipe(client, target, up, cap, (n) => (stats.bytesToTarget += n));
    pipe(target, client, down, cap, (n) => (stats.bytesFromTarget += n));
    const go = () => {
      if (failed) return;
      client.resume();
      target.resume();
    };
    target.once('connect', () => (handshakeMs > 0 ? setTimeout(go, handshakeMs) : go()));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.listenPort ?? 0, opts.listenHost ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    host: opts.listenHost ?? '127.0.0.1',
    port,
    stats,
    async close() {
      up.close();
      down.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** src -> link -> dst with backpressure: pause src while too many bytes are in flight or dst is full. */
function pipe(src: Socket, dst: Socket, line: DelayLine, cap: number, count: (n: number) => void): void {
  let inFlight = 0;
  let waitingDrain = false;
  let ended = false;
  const maybeResume = () => {
    if (inFlight < cap / 2 && !waitingDrain && !ended) src.resume();
  };
  src.on('data', (buf: Buffer) => {
    inFlight += buf.length;
    if (inFlight >= cap) src.pause();
    line.push(buf.length, () => {
      inFlight -= buf.length;
      count(buf.length);
      if (dst.destroyed) return;
      if (!dst.write(buf) && !waitingDrain) {
        waitingDrain = true;
        src.pause();
        dst.once('drain', () => {
          waitingDrain = false;
          maybeResume();
        });
      } else {
        maybeResume();
      }
    });
  });
  src.on('end', () => {
    ended = true;
    // the FIN travels the link too: it arrives after the data queued before it
    line.push(0, () => {
      if (!dst.destroyed) dst.end();
    });
  });
}
