import type { HeldLayer } from './pins.js';
import type { ResolvedLayer } from './resolver.js';

/**
 * Holds a resolved layer for a pin: the handle stays open (no idle close), the layer's chunks are
 * pinned in the cache, and its background pass (fetch everything + DiffID check) is started.
 */
/** Holds per layer: a layer shared by two pinned images stays pinned until both let go. */
const holds = new WeakMap<object, number>();

export function holdResolved(r: ResolvedLayer): HeldLayer {
  const unhold = r.handle.pin();
  const layer = r.handle.layer;
  holds.set(layer, (holds.get(layer) ?? 0) + 1);
  layer.pin?.();
  layer.start?.();
  let released = false;
  return {
    state: () => {
      const s = layer.state();
      const out: ReturnType<HeldLayer['state']> = {
        bytesFetched: s.bytesFetched,
        totalBytes: r.record.blobSize,
        percent: s.percent,
        fullyVerified: s.verified,
      };
      if (s.lastError !== undefined) out.lastError = s.lastError;
      return out;
    },
    whenDone: () => layer.whenBackgroundDone?.() ?? Promise.resolve(),
    release: () => {
      if (released) return;
      released = true;
      const left = (holds.get(layer) ?? 1) - 1;
      holds.set(layer, left);
      if (left === 0) layer.unpin?.();
      unhold();
    },
  };
}
