import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

describe('test registry helper', () => {
  let reg: TestRegistry;
  beforeAll(async () => {
    reg = await startRegistry();
  });
  afterAll(async () => {
    await reg?.stop();
  });
  it('serves the v2 API on loopback', async () => {
    const res = await fetch(`${reg.url}/v2/`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({});
  });
});
