import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/**
 * A stand-in for systemd's notify socket: a python3 child bound to a unix DATAGRAM socket (Node has
 * none) that prints one JSON line per datagram with the sender's pid from SCM_CREDENTIALS.
 * Independent of src/util/sd-notify.ts so the tests do not check the code with itself.
 */
const LISTENER = `
import json, socket, struct, sys, time
addr = sys.argv[1]
bind = '\\0' + addr[1:] if addr.startswith('@') else addr
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind(bind)
print(json.dumps({"listening": True}), flush=True)
size = struct.calcsize('3i')
while True:
    msg, anc, flags, _ = s.recvmsg(65536, socket.CMSG_SPACE(size))
    pid = None
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack('3i', data[:size])[0]
    print(json.dumps({"msg": msg.decode(), "pid": pid, "t": time.time()}), flush=True)
`;

export interface NotifyMessage {
  msg: string;
  pid: number | null;
  /** Wall-clock receive time in ms. */
  at: number;
}

export interface NotifyListener {
  readonly socket: string;
  readonly messages: NotifyMessage[];
  /** Resolves with the first message whose text contains `text` (already received or future). */
  waitFor(text: string, timeoutMs: number): Promise<NotifyMessage>;
  close(): Promise<void>;
}

export async function startNotifyListener(socketPath: string): Promise<NotifyListener> {
  const child: ChildProcess = spawn('python3', ['-u', '-c', LISTENER, socketPath], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const messages: NotifyMessage[] = [];
  const waiters: Array<{ text: string; resolve: (m: NotifyMessage) => void }> = [];
  let stderr = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (d: string) => (stderr += d));

  const listening = new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`notify listener exited ${String(code)}: ${stderr}`)));
    const rl = createInterface({ input: child.stdout! });
    rl.on('line', (line) => {
      const parsed = JSON.parse(line) as {
        listening?: boolean;
        msg?: string;
        pid?: number | null;
        t?: number;
      };
      if (parsed.listening === true) {
        resolve();
        return;
      }
      const m: NotifyMessage = { msg: parsed.msg ?? '', pid: parsed.pid ?? null, at: (parsed.t ?? 0) * 1000 };
      messages.push(m);
      for (let i = waiters.length - 1; i >= 0; i--) {
        const w = waiters[i]!;
        if (m.msg.includes(w.text)) {
          waiters.splice(i, 1);
          w.resolve(m);
        }
      }
    });
  });
  await listening;

  return {
    socket: socketPath,
    messages,
    waitFor(text, timeoutMs) {
      const found = messages.find((m) => m.msg.includes(text));
      if (found) return Promise.resolve(found);
      return new Promise<NotifyMessage>((resolve, reject) => {
        const timer = setTimeout(() => {
          const i = waiters.findIndex((w) => w.resolve === done);
          if (i >= 0) waiters.splice(i, 1);
          reject(
            new Error(
              `no notify message containing ${text} within ${timeoutMs} ms (got: ${JSON.stringify(messages)})`,
            ),
          );
        }, timeoutMs);
        const done = (m: NotifyMessage): void => {
          clearTimeout(timer);
          resolve(m);
        };
        waiters.push({ text, resolve: done });
      });
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
