import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { crashPoint, parseCrashSpec } from '../../src/util/crash-points.js';

const TS_LOADER = fileURLToPath(new URL('../integration/engine-ts-loader.mjs', import.meta.url));
const MODULE = fileURLToPath(new URL('../../src/util/crash-points.ts', import.meta.url));

/** A child that reaches `point` (with `detail`) five times, printing the count before each. */
function child(spec: string, point: string, detail: string) {
  const script =
    `const { crashPoint } = await import(${JSON.stringify(MODULE)});` +
    `for (let i = 1; i <= 5; i++) { process.stdout.write(i + ' '); crashPoint(${JSON.stringify(point)}, ${JSON.stringify(detail)}); }`;
  const c = spawn(process.execPath, ['--import', TS_LOADER, '--input-type=module', '-e', script], {
    env: { ...process.env, STARGZ_STORE_CRASH_AT: spec },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  c.stdout.on('data', (d: Buffer) => (out += d.toString()));
  return new Promise<{ out: string; code: number | null; signal: NodeJS.Signals | null }>((r) =>
    c.once('close', (code, signal) => r({ out: out.trim(), code, signal })),
  );
}

describe('crash points (test hook)', () => {
  it('parses <point>[:<nth>[:<detail>]] and refuses nonsense', () => {
    expect(parseCrashSpec(undefined)).toBeUndefined();
    expect(parseCrashSpec('')).toBeUndefined();
    expect(parseCrashSpec('chunk-write')).toEqual({ point: 'chunk-write', nth: 1 });
    expect(parseCrashSpec('chunk-write:3')).toEqual({ point: 'chunk-write', nth: 3 });
    expect(parseCrashSpec('metadata-write:2:/a:b/')).toEqual({
      point: 'metadata-write',
      nth: 2,
      detail: '/a:b/',
    });
    expect(() => parseCrashSpec('x:0')).toThrow(/STARGZ_STORE_CRASH_AT/);
    expect(() => parseCrashSpec(':1')).toThrow(/STARGZ_STORE_CRASH_AT/);
    expect(() => parseCrashSpec('x:two')).toThrow(/STARGZ_STORE_CRASH_AT/);
  });

  it('without the variable, reaching a point does nothing', () => {
    expect(process.env.STARGZ_STORE_CRASH_AT).toBeUndefined();
    for (let i = 0; i < 3; i++) crashPoint('chunk-write');
  });

  it('SIGKILLs the process the nth time the named point is reached, counting matching details only', async () => {
    expect(await child('p:3', 'p', '/x/')).toEqual({ out: '1 2 3', code: null, signal: 'SIGKILL' });
    expect(await child('p:2:/x/', 'p', '/x/')).toEqual({ out: '1 2', code: null, signal: 'SIGKILL' });
    expect(await child('p:1:/y/', 'p', '/x/')).toEqual({ out: '1 2 3 4 5', code: 0, signal: null });
    expect(await child('q', 'p', '/x/')).toEqual({ out: '1 2 3 4 5', code: 0, signal: null });
  }, 60_000);
});
