/**
 * Stand-alone shaping proxy, for running inside a network namespace (nsenter --net=... node this.js).
 * usage: node dist/bench/lib/proxy-main.js --listen 127.0.0.1:0 --target 10.1.2.3:5000
 *          [--rate-mbit 100] [--delay-ms 15]
 * Prints one JSON line {"port":N} when listening; exits on SIGTERM/SIGINT.
 */
import { parseArgs } from 'node:util';
import { mbitToBytesPerSec, startShapingProxy } from './proxy.js';

function hostPort(s: string, what: string): { host: string; port: number } {
  const i = s.lastIndexOf(':');
  const port = Number(s.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`proxy: bad ${what} "${s}" (want host:port)\n`);
    process.exit(2);
  }
  return { host: s.slice(0, i), port };
}

const { values } = parseArgs({
  options: {
    listen: { type: 'string', default: '127.0.0.1:0' },
    target: { type: 'string' },
    'rate-mbit': { type: 'string', default: '0' },
    'delay-ms': { type: 'string', default: '0' },
  },
});
if (!values.target) {
  process.stderr.write('proxy: --target host:port is required\n');
  process.exit(2);
}
const listen = hostPort(values.listen, '--listen');
const target = hostPort(values.target, '--target');
const rate = Number(values['rate-mbit']);
const delay = Number(values['delay-ms']);
const proxy = await startShapingProxy({
  listenHost: listen.host,
  listenPort: listen.port,
  targetHost: target.host,
  targetPort: target.port,
  shape: { rateBytesPerSec: rate > 0 ? mbitToBytesPerSec(rate) : 0, delayMs: delay },
});
process.stdout.write(JSON.stringify({ port: proxy.port }) + '\n');
const stop = () => void proxy.close().finally(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
