/** LayerStatus: per-chunk verification records, and none once the whole layer is verified. */
import { describe, expect, it } from 'vitest';
import type { Chunk } from '../../src/format/model.js';
import { LayerStatus } from '../../src/layer/layer-status.js';
import { silentLogger } from '../../src/util/logger.js';

const chunk = (hexByte: string, size: number): Chunk => ({
  digest: `sha256:${hexByte.repeat(32)}`,
  fileOffset: 0,
  size,
  compressedOffset: 0,
  compressedEnd: 1,
  innerOffset: 0,
});

describe('LayerStatus', () => {
  it('counts each distinct chunk once, then answers for every chunk once the layer is fully verified', () => {
    const st = new LayerStatus(silentLogger, {});
    const a = chunk('aa', 10);
    const b = chunk('bb', 20);
    st.markVerified(a);
    st.markVerified(a);
    expect(st.chunksVerified).toBe(1);
    expect(st.verifiedBytes).toBe(10);
    expect(st.wasVerified(a)).toBe(true);
    expect(st.wasVerified(b)).toBe(false);
    expect(st.fullyVerified).toBe(false);

    st.markFullyVerified();
    expect(st.fullyVerified).toBe(true);
    expect(st.wasVerified(b)).toBe(true);
    // the per-chunk record is gone, and nothing new is recorded
    expect(st.chunksVerified).toBe(0);
    st.markVerified(b);
    expect(st.chunksVerified).toBe(0);
    expect(st.verifiedBytes).toBe(10);
  });
});
