import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * An isolated Podman for tests. Everything lives in a unique temp dir, configured through
 * CONTAINERS_STORAGE_CONF / CONTAINERS_CONF / CONTAINERS_REGISTRIES_CONF (never `--root/--runroot`:
 * those drop the storage.conf driver options, additionallayerstores included — lab NOTES §5).
 * runc + cgroupfs + lowered ulimits + netns none: what works on these VMs (lab NOTES §3).
 *
 * containers/image keeps a blob-info-cache at the fixed path /var/lib/containers/cache for root;
 * it leaks "this DiffID is also known as blob X" facts between unrelated stores and pushes
 * (lab NOTES §4). Each command therefore runs in a private mount namespace with that directory
 * bind-mounted from the environment's own dir. Several environments can be used at once.
 */

export const SYSTEM_BLOB_INFO_CACHE = '/var/lib/containers/cache';

export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  ms: number;
}

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  input?: string | Buffer;
  /** SIGKILL the command after this long (default 5 minutes). */
  timeoutMs?: number;
  /** Keep at most this many bytes of each output stream (default 8 MiB). */
  maxOutput?: number;
}

/** Run a command (argv) without a shell; never throws for a non-zero exit. */
export async function runCommand(argv: string[], opts: RunOptions = {}): Promise<CommandResult> {
  const max = opts.maxOutput ?? 8 << 20;
  const t0 = Date.now();
  return await new Promise<CommandResult>((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), {
      env: opts.env ?? process.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outLen = 0;
    let errLen = 0;
    child.stdout.on('data', (b: Buffer) => {
      if (outLen < max) out.push(b);
      outLen += b.length;
    });
    child.stderr.on('data', (b: Buffer) => {
      if (errLen < max) err.push(b);
      errLen += b.length;
    });
    let timedOut = false;
    const timer = setTimeout(
      () => {
        timedOut = true;
        child.kill('SIGKILL'); // only the process we started, by its PID
      },
      opts.timeoutMs ?? 5 * 60_000,
    );
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${argv[0]}: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({
        code,
        signal,
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
        timedOut,
        ms: Date.now() - t0,
      });
    });
    child.stdin.on('error', () => {});
    child.stdin.end(opts.input);
  });
}

/**
 * argv that runs `argv` in a private mount namespace where the system blob-info-cache dir is
 * `cacheDir` (created on the host if missing: a bind needs a mount point).
 */
export function withPrivateBlobInfoCache(argv: string[], cacheDir: string): string[] {
  const script = `mkdir -p ${SYSTEM_BLOB_INFO_CACHE} && mount --bind "$0" ${SYSTEM_BLOB_INFO_CACHE} && exec "$@"`;
  return ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script, cacheDir, ...argv];
}

export interface PodmanEnvOptions {
  /** host:port registries reachable over plain HTTP. */
  insecureRegistries?: string[];
  /** Mount point of an Additional Layer Store (added as `<path>:ref`, like stargz-store wants). */
  additionalLayerStore?: string;
  /** containers/storage partial pulls (zstd:chunked / eStargz) on. */
  partialPulls?: boolean;
  /** Parent of the environment dir (default os.tmpdir()). */
  baseDir?: string;
  /** Run every command with its own blob-info-cache (default true). */
  isolateBlobInfoCache?: boolean;
}

function toml(s: string): string {
  return JSON.stringify(s);
}

export function storageConf(dir: string, opts: PodmanEnvOptions): string {
  const lines = ['[storage]', 'driver = "overlay"', `graphroot = ${toml(join(dir, 'graph'))}`];
  lines.push(`runroot = ${toml(join(dir, 'run'))}`, '', '[storage.options]');
  if (opts.additionalLayerStore)
    lines.push(`additionallayerstores = [${toml(opts.additionalLayerStore + ':ref')}]`);
  if (opts.partialPulls) {
    lines.push(
      'pull_options = {enable_partial_images = "true", use_hard_links = "false", ostree_repos = ""}',
    );
  }
  lines.push('', '[storage.options.overlay]', 'mountopt = "nodev"', '');
  return lines.join('\n');
}

export function containersConf(dir: string): string {
  return [
    '[containers]',
    'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]',
    'netns = "none"',
    'log_driver = "k8s-file"',
    '',
    '[engine]',
    'cgroup_manager = "cgroupfs"',
    'events_logger = "file"',
    `events_logfile_path = ${toml(join(dir, 'events.log'))}`,
    'runtime = "runc"',
    `tmp_dir = ${toml(join(dir, 'libpod-tmp'))}`,
    '',
  ].join('\n');
}

export function registriesConf(insecure: readonly string[]): string {
  const lines = ['unqualified-search-registries = []'];
  for (const h of insecure) lines.push('', '[[registry]]', `location = ${toml(h)}`, 'insecure = true');
  return lines.join('\n') + '\n';
}

export class TestPodman {
  private closed = false;

  private constructor(
    readonly dir: string,
    readonly env: NodeJS.ProcessEnv,
    private readonly cacheDir: string | undefined,
  ) {}

  static async create(opts: PodmanEnvOptions = {}): Promise<TestPodman> {
    const dir = await mkdtemp(join(opts.baseDir ?? tmpdir(), 'sgz-podman-'));
    const conf = join(dir, 'conf');
    await mkdir(conf, { recursive: true });
    await writeFile(join(conf, 'storage.conf'), storageConf(dir, opts));
    await writeFile(join(conf, 'containers.conf'), containersConf(dir));
    await writeFile(join(conf, 'registries.conf'), registriesConf(opts.insecureRegistries ?? []));
    let cacheDir: string | undefined;
    if (opts.isolateBlobInfoCache ?? true) {
      cacheDir = join(dir, 'blob-info-cache');
      await mkdir(cacheDir, { recursive: true });
    }
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      CONTAINERS_STORAGE_CONF: join(conf, 'storage.conf'),
      CONTAINERS_CONF: join(conf, 'containers.conf'),
      CONTAINERS_REGISTRIES_CONF: join(conf, 'registries.conf'),
    };
    return new TestPodman(dir, env, cacheDir);
  }

  get graphroot(): string {
    return join(this.dir, 'graph');
  }

  get runroot(): string {
    return join(this.dir, 'run');
  }

  /** argv for running `cmd` in this environment (private blob-info-cache when enabled). */
  argv(cmd: string[]): string[] {
    return this.cacheDir ? withPrivateBlobInfoCache(cmd, this.cacheDir) : cmd;
  }

  /** Run `podman <args>` in this environment; never throws for a non-zero exit. */
  async podman(args: string[], opts: RunOptions = {}): Promise<CommandResult> {
    if (this.closed) throw new Error('podman environment already cleaned up');
    return await runCommand(this.argv(['podman', ...args]), { ...opts, env: { ...this.env, ...opts.env } });
  }

  /** Like podman() but throws (with stderr) unless the exit code is 0. */
  async podmanOk(args: string[], opts: RunOptions = {}): Promise<CommandResult> {
    const r = await this.podman(args, opts);
    if (r.code !== 0) {
      throw new Error(
        `podman ${args.join(' ')} failed (code ${r.code}${r.timedOut ? ', timed out' : ''}): ${r.stderr.slice(-2000)}`,
      );
    }
    return r;
  }

  /** Events log lines (JSON) written by this environment's podman. */
  async events(): Promise<string[]> {
    try {
      return (await readFile(join(this.dir, 'events.log'), 'utf8')).split('\n').filter(Boolean);
    } catch {
      return [];
    }
  }

  /**
   * Remove containers and images (an Additional Layer Store sees its releases), unmount whatever
   * is still mounted below the environment dir, delete the dir.
   */
  async cleanup(): Promise<void> {
    if (this.closed) return;
    await this.podman(['rm', '-af', '-t', '0'], { timeoutMs: 120_000 }).catch(() => undefined);
    await this.podman(['rmi', '-af'], { timeoutMs: 120_000 }).catch(() => undefined);
    this.closed = true;
    await unmountUnder(this.dir);
    await rm(this.dir, { recursive: true, force: true, maxRetries: 3 });
  }
}

/** Mount points at or below `dir` in this mount namespace, deepest first. */
export async function mountsUnder(dir: string): Promise<string[]> {
  const info = await readFile('/proc/self/mountinfo', 'utf8');
  const unescape = (s: string): string =>
    s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  const prefix = dir.endsWith('/') ? dir : dir + '/';
  const points = info
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => p !== undefined)
    .map(unescape)
    .filter((p) => p === dir || p.startsWith(prefix));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

async function unmountUnder(dir: string): Promise<void> {
  for (const p of await mountsUnder(dir)) {
    const r = await runCommand(['umount', p], { timeoutMs: 30_000 });
    if (r.code !== 0) await runCommand(['umount', '-l', p], { timeoutMs: 30_000 });
  }
}
