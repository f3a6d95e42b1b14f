/** One `WWW-Authenticate` challenge: scheme (lowercased) and its auth-params (keys lowercased). */
export interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

/**
 * Parse `WWW-Authenticate` values (RFC 7235): several challenges may share one header, params
 * may be quoted with backslash escapes. Unparsable trailing junk is ignored rather than fatal:
 * a registry that sends a sloppy header should still get a token request.
 */
export function parseWwwAuthenticate(values: string | string[] | undefined): Challenge[] {
  if (values === undefined) return [];
  const out: Challenge[] = [];
  for (const v of Array.isArray(values) ? values : [values]) parseOne(v, out);
  return out;
}

const TOKEN = /[!#$%&'*+\-.^_`|~0-9A-Za-z]+/y;

function parseOne(s: string, out: Challenge[]): void {
  let i = 0;
  const skipWs = () => {
    while (i < s.length && (s[i] === ' ' || s[i] === '\t')) i++;
  };
  const token = (): string | undefined => {
    TOKEN.lastIndex = i;
    const m = TOKEN.exec(s);
    if (!m) return undefined;
    i += m[0].length;
    return m[0];
  };
  let current: Challenge | undefined;
  while (i < s.length) {
    skipWs();
    if (s[i] === ',') {
      i++;
      continue;
    }
    const start = i;
    const name = token();
    if (name === undefined) return;
    skipWs();
    if (s[i] === '=' && current) {
      // auth-param of the current challenge
      i++;
      skipWs();
      let value = '';
      if (s[i] === '"') {
        i++;
        while (i < s.length && s[i] !== '"') {
          if (s[i] === '\\' && i + 1 < s.length) i++;
          value += s[i];
          i++;
        }
        i++; // closing quote
      } else {
        // be lenient: unquoted URLs (':' and '/' are not token characters) run to ',' or space
        const start = i;
        while (i < s.length && s[i] !== ',' && s[i] !== ' ' && s[i] !== '\t') i++;
        value = s.slice(start, i);
      }
      current.params[name.toLowerCase()] = value;
      skipWs();
      if (s[i] === ',') i++;
      continue;
    }
    if (s[i] === '=' && !current) {
      i = start;
      return;
    }
    // a new challenge scheme
    current = { scheme: name.toLowerCase(), params: {} };
    out.push(current);
  }
}
