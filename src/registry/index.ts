/**
 * Registry client: the only part of the store that speaks HTTP to registries.
 *
 * Public API (everything else in src/registry is internal):
 *
 * - `parseReference(s: string): ImageRef` — normalised reference (`alpine` ->
 *   `docker.io/library/alpine:latest`), ports, IPv6 hosts, digests; bad input -> E_BAD_REFERENCE.
 * - `decodeAlsRefName(name: string): string` / `encodeAlsRefName(ref)` — ALS path component
 *   (standard base64 with padding); invalid -> E_INVALID_ARGUMENT.
 * - `new RegistryClient(opts: RegistryClientOptions)`:
 *   - `resolveImage(ref, { platform?, signal? }): Promise<ResolvedImage>`
 *   - `findLayer(ref, digestOrTocDigest, { signal? }): Promise<FoundLayer>` — searches every
 *     platform manifest of an index; E_NOT_FOUND when absent.
 *   - `openBlob(ref, digest, { size?, signal? }): Promise<BlobReader>` — `read(offset, length,
 *     signal?)`, `readRanges(ranges, signal?)`, `stats()`; exact bytes or a StoreError.
 *   - `close()`.
 * - Credentials: `MemoryCredentialProvider` (`addCredentials(map)` / `addCredentialsJson(text)`
 *   for the ALS auth-helper channel), `AuthFileProvider` (auth.json, docker config.json,
 *   credHelpers/credsStore), `defaultCredentialProviders(memory)` for the usual order.
 * - Configuration: `parseRegistriesConf(text)` (registries.conf v2/v1), `mergeHostsConfigs(...)`.
 *   The store's own config.toml (`[resolver]`, incl. TLS files) is parsed by store/config.ts.
 * - Manifest helpers: `tocAnnotation(descriptor)`, `tocOffsetHint(descriptor)`, annotation names.
 *
 * Errors are StoreErrors: E_BAD_REFERENCE, E_REGISTRY_UNAUTHORIZED / _DENIED / _NOT_FOUND /
 * _STATUS / _PROTOCOL / _NETWORK, E_MANIFEST, E_PLATFORM_NOT_FOUND, E_TOO_LARGE, E_DEADLINE,
 * E_ABORTED, E_DIGEST_MISMATCH, E_TRUNCATED. Messages and contexts never contain secrets.
 */
export { parseReference, decodeAlsRefName, encodeAlsRefName, type ImageRef } from './reference.js';
export { isValidDigest, parseDigest, type Digest } from '../util/digest.js';
export { RegistryClient, type RegistryClientOptions } from './client.js';
export {
  matchLayer,
  type ResolvedImage,
  type FoundLayer,
  type LayerDescriptor,
  type LayerMatchKind,
} from './layer-match.js';
export {
  MemoryCredentialProvider,
  CredentialChain,
  type CredentialProvider,
  type CredentialQuery,
  type Credentials,
  type HelperCredentialMap,
} from './credentials.js';
export { AuthFileProvider, defaultAuthFilePaths, type AuthFileOptions } from './auth-files.js';
export {
  mergeHostsConfigs,
  resolveEndpoints,
  isLoopbackHost,
  type HostsConfig,
  type RegistryHostConfig,
  type MirrorConfig,
  type EndpointOptions,
  type Endpoint,
} from './hosts.js';
export { parseRegistriesConf } from './registries-conf.js';
export { parsePlatform, formatPlatform, hostPlatform, normalizePlatform, type Platform } from './platform.js';
export {
  tocAnnotation,
  tocOffsetHint,
  uncompressedSizeAnnotation,
  ANNOTATION_STARGZ_TOC,
  ANNOTATION_UNCOMPRESSED_SIZE,
  ANNOTATION_ZSTD_CHECKSUM,
  ANNOTATION_ZSTD_CHECKSUM_LEGACY,
  ANNOTATION_ZSTD_POSITION,
  TOC_ANNOTATIONS,
  type Descriptor,
  type ImageManifest,
  type ImageIndex,
  type ImageConfig,
} from './manifest.js';
export type { RetryOptions } from './retry.js';

import { AuthFileProvider, type AuthFileOptions } from './auth-files.js';
import type { CredentialProvider } from './credentials.js';
import type { MemoryCredentialProvider } from './credentials.js';

/** The usual credential order: helper-channel pushes, then auth.json / docker config files. */
export function defaultCredentialProviders(
  memory?: MemoryCredentialProvider,
  files?: AuthFileOptions,
): CredentialProvider[] {
  const out: CredentialProvider[] = [];
  if (memory) out.push(memory);
  out.push(new AuthFileProvider(files));
  return out;
}
// The one registry blob reader; fleets (mirrors, pull-through caches, Dragonfly) included.
export {
  RegistryBlobReader,
  RangeFetchShared,
  type BlobReader,
  type BlobReaderStats,
  type ByteRange,
  type RegistryBlobReaderOptions,
  type RangeFetchSharedOptions,
} from './blob-reader.js';
export type { PassingBytesSink } from './whole-blob-stream.js';
export type { RangeMode, RangeProfileSnapshot } from './host-range-profile.js';
