/** One warning per failing write condition, counters, and one recovery line. */
import { describe, expect, test } from 'vitest';
import { WriteFaults, type WriteFaultEvent } from '../../src/util/write-faults.js';
import { captureLogger } from '../helpers/registry-log-capture.js';

const errno = (code: string): NodeJS.ErrnoException =>
  Object.assign(new Error(`${code}: simulated`), { code });

function records(text: string): Array<Record<string, unknown>> {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('WriteFaults', () => {
  test('thousands of failures of one condition log one warning; success logs one info', () => {
    const { logger, text } = captureLogger();
    const wf = new WriteFaults({ failed: 'cannot write chunk to cache', resumed: 'cache writes resumed' });
    const faults: WriteFaultEvent[] = [];
    const resumed: WriteFaultEvent[][] = [];
    wf.on('fault', (e) => faults.push(e));
    wf.on('resumed', (e) => resumed.push(e));
    for (let i = 0; i < 4738; i++) wf.failed(errno('ENOSPC'), logger, { digest: `sha256:${i}` });
    wf.failed(errno('EDQUOT'), logger);
    wf.failed(new Error('no code'), logger);
    let recs = records(text());
    expect(recs.map((r) => r.condition)).toEqual(['ENOSPC', 'EDQUOT', 'unknown']);
    expect(recs.every((r) => r.level === 40)).toBe(true);
    expect(String(recs[0]!.msg)).toMatch(/^cannot write chunk to cache \(ENOSPC\)/);
    expect(wf.stats()).toEqual({
      failures: 4740,
      byCondition: { ENOSPC: 4738, EDQUOT: 1, unknown: 1 },
      failing: ['ENOSPC', 'EDQUOT', 'unknown'],
    });
    expect(faults.map((f) => f.condition)).toEqual(['ENOSPC', 'EDQUOT', 'unknown']);

    wf.succeeded(logger);
    wf.succeeded(logger);
    recs = records(text());
    expect(recs).toHaveLength(4);
    expect(recs[3]!.msg).toBe('cache writes resumed');
    expect(recs[3]!.level).toBe(30);
    expect(recs[3]!.conditions).toEqual([
      { condition: 'ENOSPC', failures: 4738 },
      { condition: 'EDQUOT', failures: 1 },
      { condition: 'unknown', failures: 1 },
    ]);
    expect(resumed).toHaveLength(1);
    expect(wf.stats().failing).toEqual([]);

    // a new episode warns again
    wf.failed(errno('EROFS'), logger);
    wf.failed(errno('EROFS'), logger);
    expect(records(text()).filter((r) => r.condition === 'EROFS')).toHaveLength(1);
    expect(wf.stats().failures).toBe(4742);
  });

  test('a throwing logger does not make failed()/succeeded() throw', () => {
    const wf = new WriteFaults({ failed: 'x', resumed: 'y' });
    const bad = {
      warn: () => {
        throw new Error('logger down');
      },
      info: () => {
        throw new Error('logger down');
      },
    } as unknown as Parameters<WriteFaults['failed']>[1];
    expect(() => wf.failed(errno('ENOSPC'), bad)).not.toThrow();
    expect(() => wf.succeeded(bad)).not.toThrow();
  });
});
