import { expect } from 'vitest';

/**
 * The forms a secret can leak in: as is, base64 (Basic auth, auth.json), user:secret base64,
 * URL- and JSON-escaped. `users` adds `user:secret` pairs for every secret.
 */
export function secretForms(secrets: readonly string[], users: readonly string[] = []): string[] {
  const forms = new Set<string>();
  for (const s of secrets) {
    if (s.length < 6) throw new Error(`secret "${s}" too short to search for reliably`);
    forms.add(s);
    forms.add(Buffer.from(s).toString('base64'));
    forms.add(encodeURIComponent(s));
    forms.add(JSON.stringify(s).slice(1, -1));
    for (const u of users) forms.add(Buffer.from(`${u}:${s}`).toString('base64'));
  }
  return [...forms];
}

/**
 * Assert that no secret (in any of its forms, see secretForms) appears in any line. The message
 * names the secret's index and the line number, never the secret or the line itself.
 */
export function expectNoSecrets(
  lines: string | readonly string[],
  secrets: readonly string[],
  opts: { users?: readonly string[]; where?: string } = {},
): void {
  const all = typeof lines === 'string' ? lines.split('\n') : lines;
  const forms = secretForms(secrets, opts.users ?? []);
  const leaks: string[] = [];
  all.forEach((line, i) => {
    forms.forEach((f, k) => {
      if (line.includes(f)) leaks.push(`secret form #${k} in ${opts.where ?? 'line'} ${i + 1}`);
    });
  });
  expect(leaks, 'secrets leaked').toEqual([]);
}
