import { Lru } from '../util/lru.js';

/**
 * Which hosts to avoid for a while. A mirror that failed (5xx, timeout, refused connection) is
 * skipped for a cool-down that doubles with each consecutive failure, then tried again; a mirror
 * that answered 404 for a blob is skipped for that blob only (a pull-through cache may lack one
 * blob and hold the rest). The clock is injected so tests never sleep.
 */
export interface HostHealthOptions {
  now?: () => number;
  /** First cool-down (default 30 s). */
  cooldownMs?: number;
  /** Cap of the doubling cool-down (default 5 min). */
  maxCooldownMs?: number;
  /** Remembered per-blob misses (bounded: oldest dropped). */
  maxBlobMisses?: number;
}

interface HostState {
  failures: number;
  until: number;
}

export class HostHealth {
  private readonly now: () => number;
  private readonly cooldownMs: number;
  private readonly maxCooldownMs: number;
  private readonly hosts = new Map<string, HostState>();
  /** `origin|digest` -> retry after */
  private readonly blobMisses: Lru<string, true>;

  constructor(o: HostHealthOptions = {}) {
    this.now = o.now ?? Date.now;
    this.cooldownMs = o.cooldownMs ?? 30_000;
    this.maxCooldownMs = Math.max(this.cooldownMs, o.maxCooldownMs ?? 300_000);
    this.blobMisses = new Lru({ maxEntries: o.maxBlobMisses ?? 4096, now: this.now });
  }

  /** The host failed as a whole: skip it until its cool-down ends. */
  hostFailed(origin: string): number {
    const s = this.hosts.get(origin) ?? { failures: 0, until: 0 };
    s.failures++;
    const wait = Math.min(this.maxCooldownMs, this.cooldownMs * 2 ** Math.min(s.failures - 1, 20));
    s.until = this.now() + wait;
    this.hosts.set(origin, s);
    return wait;
  }

  /** The host does not have this blob (404): skip it for this blob only. */
  blobMissing(origin: string, digest: string): void {
    this.blobMisses.set(`${origin}|${digest}`, true, this.now() + this.cooldownMs);
  }

  /** A successful answer ends the host's cool-down and failure streak. */
  succeeded(origin: string): void {
    this.hosts.delete(origin);
  }

  /** Whether requests for `digest` (or any, when omitted) should skip this host right now. */
  isCooling(origin: string, digest?: string): boolean {
    const t = this.now();
    const s = this.hosts.get(origin);
    if (s && t < s.until) return true;
    if (digest !== undefined) {
      if (this.blobMisses.get(`${origin}|${digest}`) === true) return true;
    }
    return false;
  }

  /**
   * `items` in their configured order with cooling hosts moved to the end (still tried when
   * everything else failed: a cool-down is a preference, never an outage of its own).
   */
  order<T extends { origin: string }>(items: readonly T[], digest?: string): T[] {
    const ok: T[] = [];
    const cooling: T[] = [];
    for (const it of items) (this.isCooling(it.origin, digest) ? cooling : ok).push(it);
    return [...ok, ...cooling];
  }
}
