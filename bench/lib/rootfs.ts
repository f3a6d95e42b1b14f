import { readdir, readFile, rename, rm, mkdir, writeFile, access } from 'node:fs/promises';
import { join } from 'node:path';
import { StoreError } from '../../src/util/errors.js';
import { onCleanup } from './cleanup.js';
import { run, say, which } from './proc.js';

/**
 * Root file systems for the workloads, built offline from the Debian mirror configured in apt:
 * debootstrap --variant=minbase for the base, then packages installed with apt-get in a chroot of an
 * overlay mount whose upper directory becomes the next layer (no buildah needed).
 */

/** First non-security URI of the apt sources (deb822 .sources first, then sources.list). Pure. */
export function mirrorFromSources(deb822: string, legacy: string): string | undefined {
  for (const line of deb822.split('\n')) {
    const m = /^\s*URIs:\s*(\S+)/.exec(line);
    if (m && !m[1]!.includes('security')) return m[1];
  }
  for (const line of legacy.split('\n')) {
    const m = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)/.exec(line);
    if (m && !m[1]!.includes('security')) return m[1];
  }
  return undefined;
}

export async function aptMirror(): Promise<string> {
  let deb822 = '';
  try {
    const dir = '/etc/apt/sources.list.d';
    for (const f of (await readdir(dir)).filter((n) => n.endsWith('.sources')).sort()) {
      const text = await readFile(join(dir, f), 'utf8');
      // only Debian archive sources (other vendors' repositories are no use to debootstrap)
      if (/Suites:\s*\S*(bookworm|trixie|bullseye)/.test(text) && /debian/.test(text)) deb822 += text + '\n';
    }
  } catch {
    // no deb822 sources
  }
  const legacy = await readFile('/etc/apt/sources.list', 'utf8').catch(() => '');
  const m = mirrorFromSources(deb822, legacy);
  if (!m) throw new StoreError('E_CONFIG', 'no Debian mirror found in /etc/apt/sources.list{,.d}');
  return m;
}

/** Install the debootstrap package when missing (tell the lead: it belongs in scripts/install-deps.sh). */
export async function ensureDebootstrap(): Promise<void> {
  if (await which('debootstrap')) return;
  say('debootstrap missing: installing the Debian package');
  const apt = ['-o', 'DPkg::Lock::Timeout=600', '-y', '-qq', '--no-install-recommends'];
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const first = await run('apt-get', [...apt, 'install', 'debootstrap'], { env, allowFail: true });
  if (first.code !== 0) {
    await run('apt-get', ['-o', 'DPkg::Lock::Timeout=600', '-qq', 'update'], { env });
    await run('apt-get', [...apt, 'install', 'debootstrap'], { env });
  }
  if (!(await which('debootstrap')))
    throw new StoreError('E_NOT_FOUND', 'debootstrap still missing after apt-get');
}

async function exists(p: string): Promise<boolean> {
  try {
    await access(p);
    return true;
  } catch {
    return false;
  }
}

export interface MinbaseParams {
  suite: string;
  mirror: string;
}

/** debootstrap --variant=minbase into `dir` (cached: a marker records the parameters). */
export async function buildMinbase(dir: string, p: MinbaseParams): Promise<void> {
  const marker = `${dir}.json`;
  const want = JSON.stringify({ v: 1, ...p });
  if ((await readFile(marker, 'utf8').catch(() => '')) === want && (await exists(join(dir, 'bin')))) return;
  await ensureDebootstrap();
  const tmp = `${dir}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  await rm(dir, { recursive: true, force: true });
  say(`debootstrap --variant=minbase ${p.suite} from ${p.mirror}`);
  await run('debootstrap', ['--variant=minbase', p.suite, tmp, p.mirror], { timeoutMs: 30 * 60_000 });
  // trim like the official image does; the runtime provides /dev, /etc/resolv.conf and /etc/hostname
  for (const rel of ['var/cache/apt/archives', 'var/lib/apt/lists', 'dev', 'var/log']) {
    const d = join(tmp, rel);
    for (const n of await readdir(d).catch(() => [] as string[])) {
      if (rel === 'var/cache/apt/archives' && n === 'partial') continue;
      await rm(join(d, n), { recursive: true, force: true });
    }
  }
  for (const n of await readdir(join(tmp, 'var/cache/apt')).catch(() => [] as string[])) {
    if (n.endsWith('.bin')) await rm(join(tmp, 'var/cache/apt', n), { force: true });
  }
  await rm(join(tmp, 'etc/resolv.conf'), { force: true });
  await rm(join(tmp, 'etc/hostname'), { force: true });
  await mkdir(join(tmp, 'var/lib/apt/lists/partial'), { recursive: true });
  await rename(tmp, dir);
  await writeFile(marker, want);
}

/** Read-only overlay of `lowers` (top first) at `merged`; returns its unmount. */
export async function mountOverlay(
  merged: string,
  lowers: readonly string[],
  rw?: { upper: string; work: string },
): Promise<() => Promise<void>> {
  await mkdir(merged, { recursive: true });
  const opts = [`lowerdir=${lowers.join(':')}`];
  if (rw) {
    await mkdir(rw.upper, { recursive: true });
    await mkdir(rw.work, { recursive: true });
    opts.push(`upperdir=${rw.upper}`, `workdir=${rw.work}`);
  } else if (lowers.length < 2) {
    // overlayfs needs two lower layers when there is no upper; a bind mount is the same thing
    await run('mount', ['--bind', '-o', 'ro', lowers[0]!, merged]);
    return onCleanup(`bind ${merged}`, async () => {
      await run('umount', [merged], { allowFail: true });
    });
  }
  await run('mount', ['-t', 'overlay', 'overlay', '-o', opts.join(','), merged]);
  return onCleanup(`overlay ${merged}`, async () => {
    const r = await run('umount', [merged], { allowFail: true });
    if (r.code !== 0) await run('umount', ['-l', merged], { allowFail: true });
  });
}

/**
 * argv that runs `inner` (host paths) in a private mount namespace where /dev and /proc (and the host
 * resolv.conf, when `network`) are bound into `root`; the binds vanish with the namespace.
 */
export function withRootBinds(root: string, inner: string[], network = false): string[] {
  const binds = [
    `mount --bind /dev "$R/dev"`,
    `mount -t proc proc "$R/proc"`,
    ...(network ? [`mount --bind /etc/resolv.conf "$R/etc/resolv.conf"`] : []),
  ].join(' && ');
  return [
    'unshare',
    '-m',
    '--propagation',
    'private',
    'sh',
    '-c',
    `R="$0"; ${binds} && exec "$@"`,
    root,
    ...inner,
  ];
}

/** `inner` (image paths) chrooted into `root`, with the binds of withRootBinds. */
export function chrootArgv(root: string, inner: string[], network = false): string[] {
  return withRootBinds(root, ['chroot', root, ...inner], network);
}

export interface PackageLayerParams {
  packages: string[];
}

/** apt-get install `packages` over `lowers`; the overlay upper dir `upper` is the resulting diff. Cached. */
export async function buildPackageLayer(
  workDir: string,
  upper: string,
  lowers: readonly string[],
  p: PackageLayerParams,
): Promise<void> {
  const marker = `${upper}.json`;
  const want = JSON.stringify({ v: 1, lowers, ...p });
  if ((await readFile(marker, 'utf8').catch(() => '')) === want && (await exists(upper))) return;
  await rm(upper, { recursive: true, force: true });
  const work = `${upper}.work`;
  const merged = `${upper}.merged`;
  await rm(work, { recursive: true, force: true });
  const unmount = await mountOverlay(merged, lowers, { upper, work });
  try {
    const resolv = join(merged, 'etc/resolv.conf');
    const hadResolv = await exists(resolv);
    if (!hadResolv) await writeFile(resolv, '');
    const script = [
      'apt-get -qq update',
      `apt-get install -y -qq --no-install-recommends ${p.packages.join(' ')}`,
      'apt-get clean',
      'rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log /var/cache/debconf/*-old',
    ].join(' && ');
    say(`apt-get install ${p.packages.join(' ')} (chroot over overlay)`);
    const argv = chrootArgv(
      merged,
      [
        '/usr/bin/env',
        '-i',
        'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        'DEBIAN_FRONTEND=noninteractive',
        'LANG=C.UTF-8',
        '/bin/sh',
        '-c',
        script,
      ],
      true,
    );
    await run(argv[0]!, argv.slice(1), { timeoutMs: 30 * 60_000 });
    if (!hadResolv) await rm(resolv, { force: true });
  } finally {
    await unmount();
    await rm(work, { recursive: true, force: true });
    await rm(merged, { recursive: true, force: true });
  }
  await writeFile(marker, want);
}
