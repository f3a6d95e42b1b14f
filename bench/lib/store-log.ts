/**
 * Facts the benchmark reads from a store's log (pure). Our store logs one pino JSON line per layer it
 * serves lazily, `"msg":"layer resolved: ..."` with the ALS directory digest and `ms` = time from the
 * first lookup to the answer. The Go stargz-store v0.12 logs no such timing (its "successfully resolved
 * layer" is a debug line without digest or duration), so for it the figure is reported as n/a.
 */

export interface LayerResolution {
  digest: string;
  ms: number;
}

export const GO_RESOLVE_NA = 'Go stargz-store v0.12 logs no per-layer resolution time';

/** `layer resolved` lines of a JSON-lines log; the first line per digest counts. */
export function parseResolutions(log: string): LayerResolution[] {
  const out: LayerResolution[] = [];
  const seen = new Set<string>();
  for (const line of log.split('\n')) {
    if (!line.includes('layer resolved')) continue;
    let o: unknown;
    try {
      o = JSON.parse(line);
    } catch {
      continue;
    }
    if (typeof o !== 'object' || o === null) continue;
    const r = o as Record<string, unknown>;
    if (typeof r.msg !== 'string' || !r.msg.startsWith('layer resolved')) continue;
    const digest = typeof r.digest === 'string' ? r.digest : undefined;
    const ms = typeof r.ms === 'number' ? r.ms : Number(r.ms);
    if (!digest || !Number.isFinite(ms) || seen.has(digest)) continue;
    seen.add(digest);
    out.push({ digest, ms });
  }
  return out;
}
