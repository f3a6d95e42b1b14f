import { openLayer } from '../format/open-layer.js';
import { AuthFileProvider, RegistryClient, tocAnnotation, type ImageRef } from '../registry/index.js';
import { Transport, dump } from '../registry/transport.js';
import type { StoreConfig } from '../store/config.js';
import { asStoreError } from '../util/errors.js';
import { authFilePaths, hostsFromStoreConfig } from './config-options.js';
import type { DoctorCheck } from './doctor.js';

/** `stargz-store doctor`'s registry checks for `--image REF`: credentials, Range support, each layer. */

/** Credentials for REF's registry: which file (never the secret). */
export async function checkCredentials(ref: ImageRef, config: StoreConfig | undefined): Promise<DoctorCheck> {
  const id = 'credentials';
  const paths = config ? authFilePaths(config) : [];
  for (const p of paths) {
    try {
      const c = await new AuthFileProvider({ paths: [p] }).get({
        host: ref.registry,
        repository: ref.repository,
        ref: ref.toString(),
        isUpstream: true,
      });
      if (c !== undefined)
        return { id, status: 'pass', message: `credentials for ${ref.registry} from ${p}` };
    } catch (err) {
      return { id, status: 'fail', message: `${p}: ${asStoreError(err).message}`, fix: `repair ${p}` };
    }
  }
  return {
    id,
    status: 'warn',
    message: `no credentials for ${ref.registry} in ${paths.join(', ') || 'any auth file'} (fine for a public registry; Podman >= 5.2 passes them through the auth helper)`,
    fix: `podman login ${ref.registry} (writes auth.json)`,
  };
}

/** The registry answers, honours Range and multi-range; each layer lazily servable or why not. */
export async function checkRegistry(
  ref: ImageRef,
  config: StoreConfig | undefined,
  timeoutMs: number,
): Promise<DoctorCheck[]> {
  const providers = config ? [new AuthFileProvider({ paths: authFilePaths(config) })] : [];
  const client = new RegistryClient({
    ...(config ? { hosts: hostsFromStoreConfig(config) } : {}),
    credentials: providers,
    retry: { maxRetries: 1, minWaitMs: 50, maxWaitMs: 500 },
    requestTimeoutMs: timeoutMs,
  });
  const transport = new Transport({
    credentials: providers[0],
    retry: { maxRetries: 0, minWaitMs: 50, maxWaitMs: 500 },
    requestTimeoutMs: timeoutMs,
  });
  const out: DoctorCheck[] = [];
  try {
    let image;
    try {
      image = await client.resolveImage(ref);
    } catch (err) {
      out.push({
        id: 'registry',
        status: 'fail',
        message: `${ref.toString()}: ${asStoreError(err).message}`,
        fix: 'check the reference, the network path to the registry and its credentials',
      });
      return out;
    }
    out.push({
      id: 'registry',
      status: 'pass',
      message: `${ref.registry} answers: ${ref.toString()} has ${image.layers.length} layer(s)`,
    });
    const first = image.layers.reduce((a, b) => (b.size > a.size ? b : a), image.layers[0]!);
    const ep = client.endpoints(ref)[0]!;
    const probe = async (range: string): Promise<{ status: number; type: string }> =>
      await transport.send(
        {
          ep,
          path: `blobs/${first.digest}`,
          headers: { range },
          ref: ref.toString(),
          what: 'blob',
          deadlineMs: timeoutMs,
        },
        async (res) => {
          await dump(res);
          return { status: res.status, type: String(res.headers['content-type'] ?? '') };
        },
      );
    try {
      const single = await probe('bytes=0-0');
      if (single.status !== 206) {
        out.push({
          id: 'range',
          status: 'fail',
          message: `${ep.host} ignores Range (HTTP ${single.status} for bytes=0-0): every read would fetch whole blobs`,
          fix: `use a registry or mirror that honours Range, or drop the mirror ${ep.host} from [resolver]/registries.conf`,
        });
      } else if (first.size < 4) {
        out.push({ id: 'range', status: 'pass', message: `${ep.host} honours Range` });
      } else {
        const multi = await probe('bytes=0-0,2-2');
        out.push(
          multi.status === 206 && multi.type.startsWith('multipart/byteranges')
            ? { id: 'range', status: 'pass', message: `${ep.host} honours Range and multi-range` }
            : {
                id: 'range',
                status: 'warn',
                message: `${ep.host} honours Range but not multi-range (HTTP ${multi.status}, ${multi.type || 'no content-type'}): one request per range`,
                fix: 'nothing required; a registry with multi-range support needs fewer requests',
              },
        );
      }
    } catch (err) {
      out.push({
        id: 'range',
        status: 'fail',
        message: `range request to ${ep.host}: ${asStoreError(err).message}`,
        fix: 'check the registry',
      });
    }
    for (const [i, l] of image.layers.entries()) {
      const id = `layer-${i}`;
      const toc = tocAnnotation(l);
      if (toc === undefined) {
        out.push({
          id,
          status: 'warn',
          message: `${l.digest}: not lazy (${l.mediaType}, no TOC): it is pulled normally; convert it`,
          fix: 'push it as eStargz or zstd:chunked (podman push --compression-format zstd:chunked, ctr-remote image optimize)',
        });
        continue;
      }
      try {
        const blob = await client.openBlob(ref, l.digest, { size: l.size });
        const index = await openLayer(blob, { expectedTocDigest: toc.value });
        out.push({ id, status: 'pass', message: `${l.digest}: lazy (${index.format}, TOC verified)` });
      } catch (err) {
        out.push({
          id,
          status: 'fail',
          message: `${l.digest}: not lazy: ${asStoreError(err).message}`,
          fix: 'rebuild and push the layer; a TOC that does not verify is never served',
        });
      }
    }
  } finally {
    await transport.close();
    await client.close();
  }
  return out;
}
