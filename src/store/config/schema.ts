import { z } from 'zod';
import { formatPlatform, hostPlatform } from '../../registry/platform.js';
import {
  BACKGROUND_DEFAULTS,
  CACHE_DEFAULTS,
  DEADLINE_DEFAULTS_SEC,
  IDLE_LAYER_TTL_SEC,
  MAX_TOC_ENTRIES,
} from '../../util/defaults.js';
import {
  absPathOrEmpty,
  bool,
  entry,
  documented,
  ignored,
  int,
  issue,
  oneOf,
  seconds,
  str,
  table,
} from './fields.js';
import { DEFAULT_REGISTRIES_CONF } from './locations.js';
import { hostEntry } from './schema-resolver.js';

export type { MirrorConfig, TlsFiles } from './schema-resolver.js';

/**
 * The declared config.toml: every key once, with its check, default and doc line. StoreConfig (the
 * type), the defaults, docs/config.md and the unknown-key warnings all come from `fileSchema`.
 * Keys of the Go stargz-store keep their names, defaults and "zero means default" rule
 * (stargz-format.md §6.1) so an existing config.toml works unchanged; our own keys are grouped in
 * [cache], [deadlines], [platform] and [registry].
 *
 * Adding a key: one line in the right table below (snake_case name, builder, default, doc). The
 * StoreConfig field (camelCase) follows; add the key to systemd/config.toml and run
 * `npm run docs:config` (test/unit/config-docs.test.ts checks both).
 */

export { DEFAULT_REGISTRIES_CONF };

// ---- [debug]: Go's `debug = true`, or our table (TOML cannot hold both) ----

const debugTable = documented(
  entry({
    fuse: bool(false, 'FUSE request debug log (same as the Go `debug = true`)'),
    record_accesses: absPathOrEmpty(
      '',
      'off',
      'append one JSON line per first open (and first readlink) of each diff file; same as --record-accesses',
    ),
  }),
  {
    doc: 'debugging aids; delete the Go `debug = ...` line to use this table (`fuse = true` means the same)',
  },
);

const PLATFORM_RE = /^[a-z0-9_.-]+\/[a-z0-9_.-]+(\/[a-z0-9_.-]+)?$/;

// ---- the file ----

export const fileSchema = z.object({
  // Go top-level keys
  http_cache_type: oneOf(
    ['disk', 'memory'],
    'disk',
    { doc: 'HTTP cache type', noEffect: true },
    { emptyIsDefault: true },
  ),
  filesystem_cache_type: oneOf(
    ['disk', 'memory'],
    'disk',
    { doc: 'filesystem cache type', noEffect: true },
    { emptyIsDefault: true },
  ),
  resolve_result_entry_ttl_sec: int(IDLE_LAYER_TTL_SEC, 'how long an unused resolved layer stays open', {
    zeroIsDefault: true,
  }),
  prefetch_size: int(0, 'bytes prefetched from the blob start when the layer has no landmark'),
  prefetch_timeout_sec: int(10, { doc: 'prefetch timeout', noEffect: true }, { zeroIsDefault: true }),
  prefetch_async_size: int(0, { doc: 'asynchronous prefetch size', noEffect: true }),
  noprefetch: bool(false, 'true: never prefetch'),
  no_background_fetch: bool(false, 'true: fetch only what is read (no full-layer fetch + DiffID check)'),
  debug: documented(
    z.union([z.boolean(), debugTable], { error: 'must be true or false (Go) or a [debug] table' }).optional(),
    {
      doc: 'FUSE request debug log (Go); or the [debug] table below, not both',
      defaultDoc: 'false',
      kind: 'boolean or table',
    },
  ),
  allow_no_verification: bool(false, { doc: 'every chunk is always verified', noEffect: true }),
  disable_verification: documented(
    z
      .boolean({ error: 'must be true or false' })
      .superRefine((v, ctx) => {
        if (v) issue(ctx, 'verification cannot be disabled (true is fatal, as in the Go store)', v);
      })
      .optional(),
    { doc: 'true is FATAL: verification cannot be disabled', defaultDoc: 'false', kind: 'boolean' },
  ),
  max_concurrency: int(2, 'background fetch tasks', { zeroIsDefault: true, min: 1 }),
  max_toc_entries: int(
    MAX_TOC_ENTRIES,
    'layers whose TOC has more entries are refused early (E_TOO_MANY_ENTRIES): clients pull them',
    { zeroIsDefault: true, min: 1 },
  ),
  no_prometheus: bool(false, { doc: 'Go metrics switch (see metrics_address)', noEffect: true }),
  log_file_access: bool(false, { doc: 'per-file access log of the Go store', noEffect: true }),
  metadata_store: oneOf(
    ['memory', 'db'],
    'memory',
    { doc: 'metadata store type', noEffect: true },
    { emptyIsDefault: true },
  ),
  metrics_address: str('', 'host:port serving Prometheus /metrics, e.g. "127.0.0.1:9402"; "" = off'),
  resolve_result_entry: ignored('deprecated Go key'),

  blob: table(
    {
      valid_interval: int(60, { doc: 'blob validity interval', noEffect: true }, { zeroIsDefault: true }),
      check_always: bool(false, { doc: 'check the blob on every access', noEffect: true }),
      chunk_size: int(50000, 'HTTP block size in bytes: reads are rounded to whole blocks', {
        zeroIsDefault: true,
        min: 1,
      }),
      fetching_timeout_sec: int(300, 'bound on one blob data fetch', { zeroIsDefault: true, min: 1 }),
      force_single_range_mode: bool(false, 'true: never send multi-range requests'),
      prefetch_chunk_size: int(0, { doc: 'prefetch chunk size', noEffect: true }),
      max_retries: int(5, 'retries per request (network errors, 429, 5xx)', { zeroIsDefault: true }),
      min_wait_msec: int(30, 'first retry back-off', { zeroIsDefault: true, min: 1 }),
      max_wait_msec: int(300000, 'back-off cap', { zeroIsDefault: true, min: 1 }),
    },
    undefined,
    (b, ctx) => {
      if (b.minWaitMsec > b.maxWaitMsec)
        issue(ctx, `must not exceed max_wait_msec (${b.maxWaitMsec})`, b.minWaitMsec, ['min_wait_msec']);
    },
  ).transform(({ validInterval, ...b }) => ({ validIntervalSec: validInterval, ...b })),

  directory_cache: table(
    {
      max_lru_cache_entry: int(10, { doc: 'LRU entries', noEffect: true }, { zeroIsDefault: true }),
      max_cache_fds: int(10, { doc: 'open cache files', noEffect: true }, { zeroIsDefault: true }),
      sync_add: bool(false, { doc: 'synchronous cache writes', noEffect: true }),
      direct: bool(true, { doc: 'direct cache reads', noEffect: true }),
      fadv_dontneed: bool(false, { doc: 'fadvise DONTNEED', noEffect: true }),
    },
    'the chunk cache is configured in [cache]',
  ),

  fuse: table(
    {
      // The Go store fixes both at 1 s whatever the file says; so do we.
      attr_timeout: int(1, { doc: 'fixed at 1 s, like Go', noEffect: true }, { zeroIsDefault: true }),
      entry_timeout: int(1, { doc: 'fixed at 1 s, like Go', noEffect: true }, { zeroIsDefault: true }),
      passthrough: bool(false, { doc: 'FUSE passthrough', noEffect: true }),
      merge_buffer_size: int(
        419430400,
        { doc: 'merge buffer size', noEffect: true },
        { zeroIsDefault: true },
      ),
      merge_worker_count: int(10, { doc: 'merge workers', noEffect: true }, { zeroIsDefault: true }),
    },
    'FUSE tuning of the Go store',
  ),

  kubeconfig_keychain: table({
    enable_keychain: bool(false, 'not supported here (a warning if true)'),
    kubeconfig_path: str('', 'kubeconfig of the keychain'),
  }),

  resolver: table({
    request_timeout_sec: int(30, 'per request (covers the whole response body)', {
      zeroIsDefault: true,
      min: 1,
    }),
    host: z.record(z.string(), hostEntry, { error: 'must be a table' }).default({}),
  }).transform(({ host, ...r }) => ({ ...r, hosts: host })),

  // Ours
  cache: table(
    {
      max_bytes: int(CACHE_DEFAULTS.maxBytes, 'disk bound of the chunk cache; 0 = no byte limit'),
      min_free_bytes: int(
        CACHE_DEFAULTS.minFreeBytes,
        'evict while the cache filesystem has less free space; 0 = no margin',
      ),
      memory_bytes: int(CACHE_DEFAULTS.memoryBytes, 'in-memory LRU in front of the disk cache; 0 = none'),
    },
    'content-addressed chunk cache under <root>/cache',
  ),

  background: table(
    {
      quiet_ms: int(
        BACKGROUND_DEFAULTS.quietMs,
        'start (and resume) only after this long without on-demand reads, ms',
      ),
      bandwidth_bytes_per_sec: int(
        BACKGROUND_DEFAULTS.bandwidthBytesPerSec,
        'store-wide cap of background bytes/s; 0 = unlimited',
      ),
      concurrency: int(0, 'background fetch tasks at once, store-wide; 0 = max_concurrency'),
    },
    'full-layer fetch + DiffID check, after start-up',
  ),

  deadlines: table(
    {
      lookup_sec: seconds(
        DEADLINE_DEFAULTS_SEC.lookup,
        'resolving a layer on lookup of diff/info/blob (then ENOENT)',
      ),
      read_sec: seconds(DEADLINE_DEFAULTS_SEC.read, 'one file read (then EIO)'),
      fuse_sec: seconds(
        DEADLINE_DEFAULTS_SEC.fuse,
        'hard cap on any FUSE operation that may do I/O; must be > the two above',
      ),
      negative_ttl_sec: seconds(
        DEADLINE_DEFAULTS_SEC.negativeTtl,
        'how long "not lazily servable" (ENOENT) is remembered',
      ),
    },
    'seconds; fractions allowed',
    (d, ctx) => {
      // the adapter's hard limit must leave the store time to give its own answer (ENOENT, EIO)
      if (d.fuseSec <= d.lookupSec || d.fuseSec <= d.readSec)
        issue(
          ctx,
          `must be greater than lookup_sec (${d.lookupSec}) and read_sec (${d.readSec})`,
          d.fuseSec,
          ['fuse_sec'],
        );
    },
  ),

  platform: table({
    platforms: documented(
      z
        .array(
          z.string({ error: 'entries must look like "os/arch[/variant]"' }).regex(PLATFORM_RE, {
            error: 'entries must look like "os/arch[/variant]"',
          }),
          { error: 'must be a non-empty array like ["linux/amd64"]' },
        )
        .min(1, { error: 'must be a non-empty array like ["linux/amd64"]' })
        // what this node runs (a container runtime pulls for its own platform)
        .default(() => [formatPlatform(hostPlatform())]),
      {
        doc: 'manifests are resolved for these; layers are found in any platform',
        defaultDoc: 'the host platform',
        kind: 'array of "os/arch[/variant]"',
      },
    ),
  }),

  registry: table({
    auth_file: absPathOrEmpty(
      '',
      'the default',
      'containers auth.json; "" = $REGISTRY_AUTH_FILE, /run/containers/0/auth.json, ...',
    ),
    docker_config: absPathOrEmpty(
      '',
      'the default',
      'docker config.json; "" = $DOCKER_CONFIG/config.json or ~/.docker/config.json',
    ),
    registries_conf: absPathOrEmpty(
      DEFAULT_REGISTRIES_CONF,
      'the default',
      'registries.conf for mirrors/insecure ("" = none)',
    ),
    tag_ttl_sec: int(60, 'how long a tag -> manifest digest resolution is trusted'),
  }),
});

export type FileConfig = z.output<typeof fileSchema>;
