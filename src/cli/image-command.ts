import type { Command } from 'commander';
import { isStoreError } from '../util/errors.js';
// The registry client (undici) and the format readers load when a command runs, not at CLI start-up.
import type { HostsConfig, RegistryClientOptions } from '../registry/index.js';

export type LayerFormatName = 'estargz' | 'zstd:chunked' | 'zstd:chunked-legacy' | 'none';

export interface InspectedLayer {
  digest: string;
  size: number;
  mediaType: string;
  format: LayerFormatName;
  /** From the descriptor annotation (`containerd.io/snapshot/stargz/toc.digest` or `*zstd-chunked.manifest-checksum`). */
  tocDigest: string | null;
  /** Which annotation `tocDigest` came from. */
  tocDigestAnnotation: string | null;
  /** The same kind of digest, computed from the footer and TOC read through range requests. */
  tocDigestComputed: string | null;
  /** Every TOC annotation present (a layer may carry both kinds) equals its computed value; null when nothing to compare. */
  tocDigestMatches: boolean | null;
}

export interface InspectResult {
  ref: string;
  manifestDigest: string;
  platform: string;
  layers: InspectedLayer[];
  requests: number;
}

export interface InspectOptions {
  platform?: string;
  insecureHosts?: string[];
  client?: RegistryClientOptions;
}

/** Resolve an image and read every layer's footer + TOC through ranges. */
export async function inspectImage(refString: string, opts: InspectOptions = {}): Promise<InspectResult> {
  const [
    { openLayer },
    {
      ANNOTATION_STARGZ_TOC,
      AuthFileProvider,
      TOC_ANNOTATIONS,
      RegistryClient,
      formatPlatform,
      parsePlatform,
      parseReference,
      tocAnnotation,
      tocOffsetHint,
    },
  ] = await Promise.all([import('../format/open-layer.js'), import('../registry/index.js')]);
  const ref = parseReference(refString);
  const hosts: HostsConfig = { ...(opts.client?.hosts ?? {}) };
  for (const h of opts.insecureHosts ?? []) hosts[h] = { ...(hosts[h] ?? {}), insecure: true };
  const client = new RegistryClient({ credentials: [new AuthFileProvider()], ...opts.client, hosts });
  try {
    const img = await client.resolveImage(
      ref,
      opts.platform !== undefined ? { platform: parsePlatform(opts.platform) } : {},
    );
    const layers: InspectedLayer[] = [];
    for (const l of img.layers) {
      const ann = tocAnnotation(l);
      const reader = await client.openBlob(ref, l.digest, { size: l.size });
      let format: LayerFormatName = 'none';
      let computed: string | null = null;
      let matches: boolean | null = null;
      try {
        const hint = tocOffsetHint(l);
        const index = await openLayer(reader, hint !== undefined ? { tocOffsetHint: hint } : {});
        format = index.format;
        // toc.digest names the uncompressed TOC JSON; the zstd:chunked checksum the compressed manifest
        const computedFor = (key: string) =>
          key === ANNOTATION_STARGZ_TOC ? index.tocJsonDigest : (index.manifestChecksum ?? index.tocDigest);
        computed = ann ? computedFor(ann.key) : null;
        const present = TOC_ANNOTATIONS.filter((k) => l.annotations[k]);
        if (present.length) matches = present.every((k) => l.annotations[k] === computedFor(k));
      } catch (err) {
        if (!isStoreError(err, 'E_BAD_FOOTER') && !isStoreError(err, 'E_UNSUPPORTED_FORMAT')) throw err;
      }
      layers.push({
        digest: l.digest,
        size: l.size,
        mediaType: l.mediaType,
        format,
        tocDigest: ann?.value ?? null,
        tocDigestAnnotation: ann?.key ?? null,
        tocDigestComputed: computed,
        tocDigestMatches: ann ? (matches ?? false) : null,
      });
    }
    return {
      ref: ref.toString(),
      manifestDigest: img.manifestDigest,
      platform: formatPlatform(img.platform),
      layers,
      requests: client.counters().requests,
    };
  } finally {
    await client.close();
  }
}

export function registerImageCommands(program: Command): void {
  const image = program.command('image').description('Inspect images in a registry');
  image
    .command('inspect <ref>')
    .description(
      'Resolve <ref> and print its layers, formats and TOC digests (annotation vs. computed) as JSON',
    )
    .option('--platform <os/arch[/variant]>', 'platform to select from an index (default: this host)')
    .option(
      '--insecure-host <host>',
      'talk plain HTTP to this registry host (repeatable)',
      collect,
      [] as string[],
    )
    .option('--log-level <level>', 'log level on stderr', 'warn')
    .action(async (refString: string, o: { platform?: string; insecureHost: string[]; logLevel: string }) => {
      const { createLogger } = await import('../util/logger.js');
      const logger = createLogger(o.logLevel);
      const result = await inspectImage(refString, {
        ...(o.platform !== undefined ? { platform: o.platform } : {}),
        insecureHosts: o.insecureHost,
        client: { logger },
      });
      process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      if (result.layers.some((l) => l.tocDigestMatches === false)) process.exitCode = 2;
    });
}

function collect(v: string, prev: string[]): string[] {
  return [...prev, v];
}
