import { execFile } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBusyboxImage, parseFileSpec } from '../../bench/lib/busybox-image.js';
import { mountsUnder } from '../../bench/lib/mounts.js';
import { createShapedNetns } from '../../bench/lib/netns.js';
import { PodmanEnv } from '../../bench/lib/podman.js';
import { StraceProfileSource } from '../../bench/lib/profile.js';
import { fetchManifest } from '../../bench/lib/push.js';
import { startBenchRegistry, type BenchRegistry } from '../../bench/lib/registry-server.js';
import { sampleProcess } from '../../bench/lib/store-process.js';

// Real processes: docker-registry, curl, skopeo, podman, strace, ip/tc. Missing tools fail loudly.
const exec = promisify(execFile);

let dir: string;
let reg: BenchRegistry;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sgz-bt-'));
  reg = await startBenchRegistry({ dataDir: join(dir, 'reg'), confDir: dir });
});
afterAll(async () => {
  await reg?.stop();
  await rm(dir, { recursive: true, force: true });
});

async function curl(args: string[]): Promise<string> {
  return (await exec('curl', ['-sS', ...args])).stdout;
}

describe('bench registry', () => {
  it('counts requests and response bytes per window from its access log (checked against curl)', async () => {
    const payload = Buffer.alloc(300_000, 7);
    const file = join(dir, 'payload.txt');
    await writeFile(file, payload);
    await mkdir(join(dir, 'bb'), { recursive: true });
    const img = await buildBusyboxImage({
      registry: reg.host,
      repo: 'bt/acc',
      tag: 'gzip',
      format: 'gzip',
      files: [{ src: file, dest: '/data/p.txt' }],
      workDir: join(dir, 'bb'),
    });
    const layer = img.layers[1]!;
    await reg.settle();
    const mark = reg.mark();
    const url = `http://${reg.host}/v2/bt/acc/blobs/${layer.digest}`;
    const full = Number(await curl(['-o', '/dev/null', '-w', '%{size_download}', url]));
    const part = Number(await curl(['-o', '/dev/null', '-r', '10-109', '-w', '%{size_download}', url]));
    await curl(['-I', '-o', '/dev/null', url]);
    await reg.settle(300);
    const u = reg.usageSince(mark);
    expect(full).toBe(layer.size);
    expect(part).toBe(100);
    expect(u.requests).toBe(3);
    expect(u.bytes).toBe(full + part); // HEAD counts no body
    expect(u.blobRequests).toBe(2);
    expect(u.byClient.curl).toEqual({ requests: 3, bytes: full + part });
  });
});

describe('busybox image tool', () => {
  it.each(['gzip', 'estargz', 'zstd:chunked'] as const)(
    'builds, pushes and runs a %s image with Podman',
    async (format) => {
      const content = `content for ${format} ${Date.now()}\n`;
      const file = join(dir, `f-${format.replace(':', '-')}.txt`);
      await writeFile(file, content);
      const tag = format.replace(':', '-');
      const r = await buildBusyboxImage({
        registry: reg.host,
        repo: 'bt/app',
        tag,
        format,
        files: [{ src: file, dest: '/srv/f.txt' }],
        cmd: ['/bin/sh', '-c', 'cat /srv/f.txt; echo run-ok'],
        prioritize: ['/srv/f.txt'],
      });
      const m = await fetchManifest(reg.host, 'bt/app', tag);
      expect(m?.digest).toBe(r.manifestDigest);
      const keys = Object.keys(m!.manifest.layers[1]!.annotations ?? {});
      if (format === 'estargz') expect(keys).toContain('containerd.io/snapshot/stargz/toc.digest');
      if (format === 'zstd:chunked')
        expect(keys.some((k) => k.includes('zstd-chunked.manifest-checksum'))).toBe(true);
      if (format === 'gzip') expect(keys).toEqual([]);
      const p = await PodmanEnv.create({
        dir: join(dir, `p${tag.length}`),
        storage: { kind: 'plain' },
        insecureRegistries: [reg.host],
      });
      try {
        await p.pull(r.ref);
        const out = await p.runImage(r.ref);
        expect(out.output).toBe(content + 'run-ok\n');
      } finally {
        await p.destroy();
      }
      expect(await mountsUnder(join(dir, `p${tag.length}`))).toEqual([]);
    },
  );

  it('parses --file specs', () => {
    expect(parseFileSpec('./a/b.bin')).toEqual({ src: './a/b.bin', dest: '/data/b.bin' });
    expect(parseFileSpec('x:y/z.txt:/etc/z')).toEqual({ src: 'x:y/z.txt', dest: '/etc/z' });
    expect(() => parseFileSpec('a:/../etc')).toThrow();
  });
});

describe('access profile by strace', () => {
  it('records the files the entrypoint opens inside the image root, resolving symlinks', async () => {
    const root = join(dir, 'root');
    for (const d of ['bin', 'etc', 'dev', 'proc', 'app']) await mkdir(join(root, d), { recursive: true });
    await exec('cp', ['/bin/busybox', join(root, 'bin/busybox')]);
    for (const a of ['sh', 'cat', 'head']) await exec('ln', ['-s', 'busybox', join(root, 'bin', a)]);
    await writeFile(join(root, 'etc/wanted'), 'w');
    await writeFile(join(root, 'etc/unread'), 'u');
    await writeFile(
      join(root, 'app/run.sh'),
      '#!/bin/sh\ncat /etc/wanted >/dev/null\nhead -c 1 data >/dev/null\n',
    );
    await writeFile(join(root, 'app/data'), 'd');
    await chmod(join(root, 'app/run.sh'), 0o755);
    const p = await new StraceProfileSource().record({
      rootfs: root,
      argv: ['/app/run.sh'],
      env: ['PATH=/bin'],
      workingDir: '/app',
      scratch: dir,
    });
    expect(p.source).toBe('strace');
    expect(p.files).toContain('/app/run.sh');
    expect(p.files).toContain('/bin/busybox');
    expect(p.files).toContain('/etc/wanted');
    expect(p.files).toContain('/app/data'); // relative open resolved against the working dir
    expect(p.files).not.toContain('/etc/unread');
    expect(p.files.indexOf('/app/run.sh')).toBeLessThan(p.files.indexOf('/etc/wanted'));
    // the /dev and /proc binds lived in a private mount namespace only
    expect(await mountsUnder(root)).toEqual([]);
  });
});

describe('shaped namespace link', () => {
  it('limits the rate between two namespaces with HTB and removes everything afterwards', async () => {
    const ns = await createShapedNetns(40);
    const size = 6_000_000;
    try {
      // a TCP server in the server namespace sends `size` bytes; curl in the client namespace times it
      const server = `require('net').createServer(s=>s.end(Buffer.alloc(${size},1))).listen(8080,'${ns.serverIp}',()=>console.log('up'))`;
      const [cmd, ...args] = ns.inServer([process.execPath, '-e', server]);
      const { spawn } = await import('node:child_process');
      const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'inherit'] });
      try {
        await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
        const [c, ...a] = ns.inClient([
          'python3',
          '-c',
          `import socket,time\ns=socket.create_connection(('${ns.serverIp}',8080))\nt=time.time();n=0\nwhile True:\n  b=s.recv(1<<16)\n  if not b: break\n  n+=len(b)\nprint(n, time.time()-t)`,
        ]);
        const { stdout } = await exec(c!, a);
        const [n, secs] = stdout.trim().split(' ').map(Number);
        expect(n).toBe(size);
        const mbit = (n! * 8) / 1e6 / secs!;
        expect(mbit).toBeLessThan(40 * 1.1);
        expect(mbit).toBeGreaterThan(40 * 0.7);
      } finally {
        child.kill('SIGTERM');
      }
    } finally {
      await ns.destroy();
    }
    const list = (await exec('ip', ['netns', 'list'])).stdout;
    expect(list).not.toContain(ns.clientNs);
    expect(list).not.toContain(ns.serverNs);
  });
});

describe('process sampling', () => {
  it('reads peak RSS and CPU of a live process', async () => {
    const s = await sampleProcess(process.pid);
    expect(s!.peakRssKiB).toBeGreaterThan(10_000);
    expect(s!.cpuMs).toBeGreaterThan(0);
    expect(await sampleProcess(2 ** 22 + 12345)).toBeUndefined();
    // VmHWM as the kernel reports it for this very process
    const hwm = Number(/VmHWM:\s+(\d+)/.exec(await readFile('/proc/self/status', 'utf8'))![1]);
    expect(Math.abs(s!.peakRssKiB - hwm) / hwm).toBeLessThan(0.2);
  });
});
