import { createHash } from 'node:crypto';
import { StoreError } from '../../src/util/errors.js';
import { MT_MANIFEST } from './oci.js';
import { run, type RunResult } from './proc.js';

/** Getting images into the benchmark registry, and reading back what landed there. */

/**
 * c/image keeps a blob-info-cache in /var/lib/containers/cache (not configurable in Podman 4.3). A
 * gzip push recorded there makes a later `--compression-format zstd:chunked` push silently REUSE the
 * gzip blobs (lab NOTES §4). Every push therefore runs in a private mount namespace with an empty tmpfs
 * over that directory: nothing leaks into, or out of, the system cache.
 */
export function isolatedCacheArgv(argv: string[]): string[] {
  const script =
    'mkdir -p /var/lib/containers/cache && mount -t tmpfs sgz-bench-bic /var/lib/containers/cache && exec "$@"';
  return ['unshare', '-m', '--propagation', 'private', 'sh', '-c', script, 'sh', ...argv];
}

async function runIsolated(
  argv: string[],
  env?: NodeJS.ProcessEnv,
  timeoutMs = 60 * 60_000,
): Promise<RunResult> {
  const full = isolatedCacheArgv(argv);
  return await run(full[0]!, full.slice(1), { env: env ?? process.env, timeoutMs });
}

/** skopeo copy of one tag of an OCI layout to a plain-HTTP registry, digests preserved. */
export async function skopeoPushLayout(layout: string, tag: string, dest: string): Promise<number> {
  const r = await runIsolated([
    'skopeo',
    'copy',
    '--quiet',
    '--insecure-policy',
    '--preserve-digests',
    '--dest-tls-verify=false',
    `oci:${layout}:${tag}`,
    `docker://${dest}`,
  ]);
  return r.ms;
}

/** Import an OCI layout tag into a containers-storage (the env carries CONTAINERS_STORAGE_CONF). */
export async function importLayoutToStorage(
  layout: string,
  tag: string,
  name: string,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  await runIsolated(
    ['skopeo', 'copy', '--quiet', '--insecure-policy', `oci:${layout}:${tag}`, `containers-storage:${name}`],
    env,
  );
}

/** podman push with a compression format (zstd:chunked is only made by Podman itself here). */
export async function podmanPush(
  env: NodeJS.ProcessEnv,
  image: string,
  dest: string,
  compression: 'gzip' | 'zstd' | 'zstd:chunked',
): Promise<number> {
  const r = await runIsolated(
    [
      'podman',
      'push',
      '-q',
      '--tls-verify=false',
      '--format',
      'oci',
      '--compression-format',
      compression,
      image,
      `docker://${dest}`,
    ],
    env,
  );
  return r.ms;
}

export interface RemoteManifest {
  digest: string;
  manifest: {
    config: { digest: string; size: number };
    layers: Array<{ mediaType: string; digest: string; size: number; annotations?: Record<string, string> }>;
  };
}

/** GET a manifest (the Accept header is required: without it this registry answers 404 for OCI). */
export async function fetchManifest(
  host: string,
  repo: string,
  tag: string,
): Promise<RemoteManifest | undefined> {
  const res = await fetch(`http://${host}/v2/${repo}/manifests/${tag}`, {
    headers: { Accept: `${MT_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json` },
  });
  if (res.status === 404) {
    await res.arrayBuffer();
    return undefined;
  }
  if (!res.ok) {
    throw new StoreError('E_REGISTRY_STATUS', `manifest ${repo}:${tag}: HTTP ${res.status}`, {
      ref: `${host}/${repo}:${tag}`,
    });
  }
  const body = Buffer.from(await res.arrayBuffer());
  const digest = 'sha256:' + createHash('sha256').update(body).digest('hex');
  return { digest, manifest: JSON.parse(body.toString()) as RemoteManifest['manifest'] };
}

/** Sum of compressed layer sizes of a manifest. */
export function imageBytes(m: RemoteManifest): number {
  return m.manifest.layers.reduce((s, l) => s + l.size, 0);
}
