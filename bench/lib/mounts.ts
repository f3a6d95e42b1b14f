import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { run } from './proc.js';

/** Reading /proc/self/mountinfo and undoing our own mounts (always by path, never by pattern). */

export interface MountEntry {
  mountPoint: string;
  fsType: string;
  source: string;
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Parse /proc/self/mountinfo text (pure). */
export function parseMountinfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const [left, right] = line.split(' - ');
    if (left === undefined || right === undefined) continue;
    const f = left.split(' ');
    const r = right.split(' ');
    if (f[4] === undefined || r[0] === undefined) continue;
    out.push({ mountPoint: unescape(f[4]), fsType: r[0], source: unescape(r[1] ?? '') });
  }
  return out;
}

export async function mounts(): Promise<MountEntry[]> {
  return parseMountinfo(await readFile('/proc/self/mountinfo', 'utf8'));
}

export async function mountAt(path: string): Promise<MountEntry | undefined> {
  const p = resolve(path);
  const all = await mounts();
  for (let i = all.length - 1; i >= 0; i--) if (all[i]!.mountPoint === p) return all[i];
  return undefined;
}

/** Mount points at or below `dir`, deepest first (the order to unmount them in). */
export async function mountsUnder(dir: string): Promise<MountEntry[]> {
  const d = resolve(dir);
  return (await mounts())
    .filter((m) => m.mountPoint === d || m.mountPoint.startsWith(d + '/'))
    .sort((a, b) => b.mountPoint.length - a.mountPoint.length);
}

/** Lazily unmount everything at or below `dir` (our work dir only). Returns what was unmounted. */
export async function unmountUnder(dir: string): Promise<string[]> {
  const done: string[] = [];
  for (let pass = 0; pass < 3; pass++) {
    const list = await mountsUnder(dir);
    if (list.length === 0) break;
    for (const m of list) {
      const r = m.fsType.startsWith('fuse')
        ? await run('fusermount', ['-u', '-z', m.mountPoint], { allowFail: true })
        : { code: 1 };
      if (r.code !== 0) await run('umount', ['-l', m.mountPoint], { allowFail: true });
      done.push(m.mountPoint);
    }
  }
  return done;
}
