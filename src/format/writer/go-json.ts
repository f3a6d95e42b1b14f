/**
 * JSON output that matches Go's encoding/json byte for byte for the shapes our TOCs use, so TOC
 * digests are stable and comparable with Go-built blobs: HTML-safe string escaping, struct field
 * order = insertion order of plain objects, map keys (JS `Map`) sorted bytewise, MarshalIndent
 * layout (`prefix` "", one indent unit per level, `"key": value`).
 */

export type GoJsonValue =
  | string
  | number
  | boolean
  | null
  | GoJsonValue[]
  | Map<string, GoJsonValue>
  | { [key: string]: GoJsonValue | undefined };

const HEX = '0123456789abcdef';

/** Go `encodeState.string` with escapeHTML=true. */
export function goQuote(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      if (c >= 0x20 && c !== 0x22 && c !== 0x5c && c !== 0x3c && c !== 0x3e && c !== 0x26) {
        out += s[i];
        continue;
      }
      switch (c) {
        case 0x22:
          out += '\\"';
          break;
        case 0x5c:
          out += '\\\\';
          break;
        case 0x08:
          out += '\\b';
          break;
        case 0x0c:
          out += '\\f';
          break;
        case 0x0a:
          out += '\\n';
          break;
        case 0x0d:
          out += '\\r';
          break;
        case 0x09:
          out += '\\t';
          break;
        default:
          out += '\\u00' + HEX[c >> 4]! + HEX[c & 0xf]!;
      }
      continue;
    }
    if (c === 0x2028 || c === 0x2029) {
      out += c === 0x2028 ? '\\u2028' : '\\u2029';
      continue;
    }
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
      if (d >= 0xdc00 && d <= 0xdfff) {
        out += s[i]! + s[i + 1]!;
        i++;
        continue;
      }
      out += '\\ufffd'; // lone surrogate = invalid UTF-8 for Go
      continue;
    }
    if (c >= 0xdc00 && c <= 0xdfff) {
      out += '\\ufffd';
      continue;
    }
    out += s[i];
  }
  return out + '"';
}

/** Bytewise (UTF-8) key order, as Go sorts map[string]T keys. */
function compareUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function encodeNumber(n: number): string {
  if (!Number.isFinite(n)) throw new TypeError(`cannot encode ${n} as JSON`);
  return String(n);
}

/**
 * Serialise like Go: `indent` '' = json.Marshal (compact), otherwise json.MarshalIndent(v, "", indent).
 * Object properties whose value is `undefined` are skipped (callers implement omitempty that way).
 */
export function goJson(value: GoJsonValue, indent = ''): string {
  const parts: string[] = [];
  const nl = (depth: number): void => {
    if (indent !== '') parts.push('\n' + indent.repeat(depth));
  };
  const colon = indent === '' ? ':' : ': ';
  const walk = (v: GoJsonValue, depth: number): void => {
    if (v === null) parts.push('null');
    else if (typeof v === 'string') parts.push(goQuote(v));
    else if (typeof v === 'number') parts.push(encodeNumber(v));
    else if (typeof v === 'boolean') parts.push(v ? 'true' : 'false');
    else if (Array.isArray(v)) {
      if (v.length === 0) {
        parts.push('[]');
        return;
      }
      parts.push('[');
      v.forEach((item, i) => {
        if (i > 0) parts.push(',');
        nl(depth + 1);
        walk(item, depth + 1);
      });
      nl(depth);
      parts.push(']');
    } else {
      const entries: [string, GoJsonValue][] =
        v instanceof Map
          ? [...v.entries()].sort((a, b) => compareUtf8(a[0], b[0]))
          : (Object.entries(v).filter((e) => e[1] !== undefined) as [string, GoJsonValue][]);
      if (entries.length === 0) {
        parts.push('{}');
        return;
      }
      parts.push('{');
      entries.forEach(([k, item], i) => {
        if (i > 0) parts.push(',');
        nl(depth + 1);
        parts.push(goQuote(k), colon);
        walk(item, depth + 1);
      });
      nl(depth);
      parts.push('}');
    }
  };
  walk(value, 0);
  return parts.join('');
}

/** Go `time.Time.UTC().Format(time.RFC3339)` for whole seconds since the epoch. */
export function rfc3339(seconds: number): string {
  return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Go `time.Time` MarshalJSON (RFC3339Nano, trailing zeros of the fraction trimmed), UTC. */
export function rfc3339Nano(seconds: number, nanos: number): string {
  const base = rfc3339(seconds).slice(0, -1);
  if (nanos === 0) return base + 'Z';
  const frac = String(nanos).padStart(9, '0').replace(/0+$/, '');
  return `${base}.${frac}Z`;
}
