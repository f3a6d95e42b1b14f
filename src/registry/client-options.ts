import type { Logger } from '../util/logger.js';
import type { CredentialProvider } from './credentials.js';
import type { HostHealthOptions } from './host-health.js';
import type { HostsConfig } from './hosts.js';
import type { Platform } from './platform.js';
import type { RetryOptions } from './retry.js';
import type { PassingBytesSink } from './whole-blob-stream.js';

export interface RegistryClientOptions {
  /** Mirrors, plain-HTTP hosts, CA/client certificates, extra headers, timeouts per host. */
  hosts?: HostsConfig;
  /** Credential sources in order (e.g. the helper-channel memory provider, then auth files). */
  credentials?: CredentialProvider | CredentialProvider[];
  /** Platforms to select from an index, best first (`os/arch[/variant]` or objects). Default: this host. */
  platforms?: Array<Platform | string>;
  /** Go store defaults: max_retries 5, min_wait_msec 30, max_wait_msec 300000. */
  retry?: RetryOptions;
  /** Never send multi-range requests (Go `force_single_range_mode`). */
  forceSingleRange?: boolean;
  /** Per-attempt timeout when a host sets none (default 30 s). */
  requestTimeoutMs?: number;
  /** Budget for one blob fetch including retries (default 300 s, Go `fetching_timeout_sec`). */
  fetchTimeoutMs?: number;
  /** Budget for resolving a reference to manifest + config (default 60 s). */
  resolveTimeoutMs?: number;
  /** How long a tag -> digest answer is reused (default 60 s). */
  tagTtlMs?: number;
  maxManifestBytes?: number;
  maxConfigBytes?: number;
  maxRangesPerRequest?: number;
  /** Parallel range requests per read when ranges cannot share one request (default 4). */
  concurrency?: number;
  /**
   * Where a Range-ignoring host's whole-blob stream passes its bytes (the local compressed-bytes
   * store), so a blob is streamed at most once. Unset: nothing keeps them.
   */
  passingBytesSink?: PassingBytesSink;
  /** Mirror cool-down after a failure (default 30 s, doubling up to 5 min) and the clock it runs on. */
  hostHealth?: HostHealthOptions;
  logger?: Logger;
  userAgent?: string;
}
