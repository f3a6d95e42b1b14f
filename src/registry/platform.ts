import { StoreError } from '../util/errors.js';
import type { Descriptor } from './manifest.js';

/** OCI platform (only the fields that select a manifest). */
export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

/** Normalise names the way containerd does, so `x86_64`, `aarch64`, `arm64/v8` compare equal. */
export function normalizePlatform(p: Platform): Platform {
  const os = p.os.toLowerCase() === 'macos' ? 'darwin' : p.os.toLowerCase();
  let architecture = p.architecture.toLowerCase();
  let variant = p.variant?.toLowerCase() || undefined;
  switch (architecture) {
    case 'i386':
      architecture = '386';
      variant = undefined;
      break;
    case 'x86_64':
    case 'x86-64':
    case 'amd64':
      architecture = 'amd64';
      if (variant === 'v1') variant = undefined;
      break;
    case 'aarch64':
    case 'arm64':
      architecture = 'arm64';
      if (variant === '8' || variant === 'v8') variant = undefined;
      break;
    case 'armhf':
      architecture = 'arm';
      variant = 'v7';
      break;
    case 'armel':
      architecture = 'arm';
      variant = 'v6';
      break;
    case 'arm':
      if (variant === undefined || variant === '7') variant = 'v7';
      else if (variant === '5' || variant === '6' || variant === '8') variant = `v${variant}`;
      break;
  }
  return variant === undefined ? { os, architecture } : { os, architecture, variant };
}

/** `os/arch[/variant]` */
export function parsePlatform(s: string): Platform {
  const parts = s.trim().split('/');
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => !/^[A-Za-z0-9_.-]+$/.test(p))) {
    throw new StoreError(
      'E_INVALID_ARGUMENT',
      `invalid platform "${s.slice(0, 100)}" (want os/arch[/variant])`,
      {
        platform: s.slice(0, 100),
      },
    );
  }
  return normalizePlatform({ os: parts[0]!, architecture: parts[1]!, variant: parts[2] });
}

export function formatPlatform(p: Platform): string {
  return p.variant ? `${p.os}/${p.architecture}/${p.variant}` : `${p.os}/${p.architecture}`;
}

/** The platform of this process (what the container runtime on this node runs by default). */
export function hostPlatform(): Platform {
  // read at call time (not bound at import), so the answer is always this process's
  const osArch: string = process.arch;
  const osPlatform: string = process.platform;
  const map: Record<string, string> = {
    x64: 'amd64',
    ia32: '386',
    arm64: 'arm64',
    arm: 'arm',
    ppc64: 'ppc64le',
    s390x: 's390x',
    riscv64: 'riscv64',
    loong64: 'loong64',
    mips64el: 'mips64le',
  };
  const architecture = map[osArch] ?? osArch;
  let variant: string | undefined;
  if (architecture === 'arm') {
    const v = (process.config.variables as unknown as Record<string, unknown>)['arm_version'];
    variant = typeof v === 'string' || typeof v === 'number' ? `v${v}` : 'v7';
  }
  return normalizePlatform({ os: osPlatform === 'win32' ? 'windows' : osPlatform, architecture, variant });
}

/**
 * Variants a platform can run, best first (containerd's `Only` matcher): arm v7 also runs v6 and
 * v5 images. arm64 hosts do not fall back to 32-bit arm (not every kernel has aarch32).
 */
function compatibleVariants(p: Platform): Array<string | undefined> {
  if (p.architecture === 'arm') {
    const order = ['v8', 'v7', 'v6', 'v5'];
    const i = order.indexOf(p.variant ?? 'v7');
    return i < 0 ? [p.variant] : order.slice(i);
  }
  if (p.architecture === 'amd64') {
    // amd64 v2/v3/v4 binaries need a CPU feature check that we do not do; plain amd64 only
    return p.variant === undefined ? [undefined] : [p.variant, undefined];
  }
  return [p.variant];
}

/**
 * Rank of `candidate` for `wanted` (0 = best), or -1 when it does not match. A descriptor without
 * platform matches everything (OCI: "applies to all").
 */
export function platformRank(wanted: Platform, candidate: Platform | undefined): number {
  if (candidate === undefined) return 0;
  const w = normalizePlatform(wanted);
  const c = normalizePlatform(candidate);
  if (w.os !== c.os || w.architecture !== c.architecture) return -1;
  const variants = compatibleVariants(w);
  const i = variants.indexOf(c.variant);
  return i;
}

export function platformMatches(wanted: Platform, candidate: Platform | undefined): boolean {
  return platformRank(wanted, candidate) >= 0;
}

/** The entry of an index that best fits the first wanted platform any entry fits. */
export function choosePlatform(entries: Descriptor[], wanted: Platform[]): Descriptor | undefined {
  for (const w of wanted) {
    let best: { d: Descriptor; rank: number } | undefined;
    for (const d of entries) {
      const r = platformRank(w, d.platform);
      if (r >= 0 && (!best || r < best.rank)) best = { d, rank: r };
    }
    if (best) return best.d;
  }
  return undefined;
}
