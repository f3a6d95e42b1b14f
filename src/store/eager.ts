import { matchLayer } from '../registry/index.js';
import { tocAnnotation } from '../registry/manifest.js';
import type { LayerMatch } from './deps.js';
import { Lru } from '../util/lru.js';

/** How long a manifest's layer list answers lookups of its other layers without the registry. */
const KNOWN_IMAGE_TTL_MS = 10 * 60_000;
/** Refs whose layer lists are remembered (least recently learned are forgotten first). */
const KNOWN_IMAGES_MAX = 256;

/**
 * The layer lists of the platform manifests the store found layers in, by ref. A later lookup of
 * another layer of the same image (by blob digest or TOC digest, whichever form the client uses)
 * is matched here without asking the registry again. Digests are content addresses, so a tag moved
 * meanwhile cannot make a remembered match wrong, only absent (then the registry is asked).
 */
export class KnownImages {
  private readonly byRef: Lru<string, LayerMatch>;

  constructor(private readonly now: () => number = Date.now) {
    this.byRef = new Lru({ maxEntries: KNOWN_IMAGES_MAX, now });
  }

  learn(ref: string, found: LayerMatch): void {
    if (!found.layers) return;
    this.byRef.set(ref, found, this.now() + KNOWN_IMAGE_TTL_MS);
  }

  match(ref: string, digest: string): LayerMatch | undefined {
    const known = this.byRef.get(ref);
    if (!known) return undefined;
    const layers = known.layers!;
    const hit = matchLayer(
      layers.map((l) => l.descriptor),
      digest,
    );
    if (!hit) return undefined;
    return {
      manifestDigest: known.manifestDigest,
      configDigest: known.configDigest,
      descriptor: hit.descriptor,
      matchedBy: hit.matchedBy,
      diffId: layers[hit.layerIndex]!.diffId,
      layers,
    };
  }
}

/**
 * The names under which the client will look up the other layers of `found`'s image, base first:
 * the same form it used for this one (blob digest for OLD clients, TOC digest for NEW ones).
 */
export function siblingNames(found: LayerMatch): string[] {
  const out: string[] = [];
  for (const { descriptor } of found.layers ?? []) {
    if (descriptor.digest === found.descriptor.digest) continue;
    const name = found.matchedBy === 'blob' ? descriptor.digest : tocAnnotation(descriptor)?.value;
    if (name !== undefined && !out.includes(name)) out.push(name);
  }
  return out;
}

/**
 * Runs resolutions ahead of the client with bounded concurrency, in the order queued. A queued name
 * holds nothing: when the client asks for it first, its lookup starts the resolution at once and the
 * queued job finds it in flight (or done) and skips it.
 */
export class EagerQueue {
  private readonly queue: Array<() => Promise<unknown> | undefined> = [];
  private running = 0;
  private waiters: Array<() => void> = [];

  constructor(private readonly concurrency: number) {}

  /** `job` returns the resolution it started, or undefined when there was nothing left to do. */
  push(job: () => Promise<unknown> | undefined): void {
    this.queue.push(job);
    this.pump();
  }

  /** Resolves once nothing is queued or running (tests, shutdown). */
  idle(): Promise<void> {
    if (this.running === 0 && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  clear(): void {
    this.queue.length = 0;
    this.settle();
  }

  private pump(): void {
    while (this.running < this.concurrency && this.queue.length > 0) {
      const p = this.queue.shift()!();
      if (!p) continue;
      this.running++;
      void p
        .catch(() => undefined)
        .finally(() => {
          this.running--;
          this.pump();
        });
    }
    this.settle();
  }

  private settle(): void {
    if (this.running > 0 || this.queue.length > 0) return;
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }
}
