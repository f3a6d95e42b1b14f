import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { inspectImage, registerImageCommands, type InspectResult } from '../../src/cli/image-command.js';
import { pushBlob, pushManifest, sha256 } from '../helpers/push.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { SHARED } from '../helpers/shared.js';

const SAMPLES = `${SHARED}/samples/tiny`;
const FORMATS = ['estargz', 'esgz-opt', 'zstd-chunked', 'ctr-zstdchunked', 'gzip'] as const;

interface SampleManifest {
  config: { digest: string };
  layers: Array<{ digest: string; size: number; mediaType: string; annotations?: Record<string, string> }>;
}

describe('stargz-store image inspect on the lab samples', () => {
  let reg: TestRegistry;
  const manifests = new Map<string, { bytes: Buffer; json: SampleManifest }>();

  beforeAll(async () => {
    reg = await startRegistry();
    for (const fmt of FORMATS) {
      const dir = join(SAMPLES, fmt);
      const bytes = await readFile(join(dir, 'manifest.json'));
      const json = JSON.parse(bytes.toString()) as SampleManifest;
      const files = await readdir(dir);
      for (const f of files.filter((n) => n.startsWith('layer')))
        await pushBlob({ url: reg.url }, 'lab/tiny', await readFile(join(dir, f)));
      await pushBlob({ url: reg.url }, 'lab/tiny', await readFile(join(dir, 'config.json')));
      await pushManifest(
        { url: reg.url },
        'lab/tiny',
        fmt,
        bytes,
        'application/vnd.oci.image.manifest.v1+json',
      );
      manifests.set(fmt, { bytes, json });
    }
  });
  afterAll(async () => {
    await reg?.stop();
  });

  it.each(FORMATS)('%s: formats and TOC digests (annotation == computed through ranges)', async (fmt) => {
    const res = await inspectImage(`${reg.host}/lab/tiny:${fmt}`, { platform: 'linux/amd64' });
    const m = manifests.get(fmt)!;
    expect(res.manifestDigest).toBe(sha256(m.bytes));
    expect(res.platform).toBe('linux/amd64');
    expect(res.layers.map((l) => l.digest)).toEqual(m.json.layers.map((l) => l.digest));
    for (const [i, l] of res.layers.entries()) {
      const ann = m.json.layers[i]!.annotations ?? {};
      expect(l.size).toBe(m.json.layers[i]!.size);
      if (fmt === 'gzip') {
        expect(l.format).toBe('none');
        expect(l.tocDigest).toBeNull();
        expect(l.tocDigestComputed).toBeNull();
        continue;
      }
      expect(l.format).toMatch(fmt.includes('zstd') ? /^zstd:chunked/ : /^estargz$/);
      const expected =
        ann['containerd.io/snapshot/stargz/toc.digest'] ??
        ann['io.containers.zstd-chunked.manifest-checksum'];
      expect(l.tocDigest).toBe(expected);
      expect(l.tocDigestComputed).toBe(expected);
      expect(l.tocDigestMatches).toBe(true);
    }
    // footer + TOC only: a handful of requests, not whole blobs
    expect(res.requests).toBeLessThan(10 + 6 * res.layers.length);
  });

  it('prints JSON through the commander command', async () => {
    const program = new Command('stargz-store').exitOverride();
    registerImageCommands(program);
    const out: string[] = [];
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString());
      return true;
    });
    try {
      await program.parseAsync([
        'node',
        'stargz-store',
        'image',
        'inspect',
        `${reg.host}/lab/tiny:estargz`,
        '--platform',
        'linux/amd64',
        '--log-level',
        'silent',
      ]);
    } finally {
      spy.mockRestore();
    }
    const parsed = JSON.parse(out.join('')) as InspectResult;
    expect(parsed.manifestDigest).toBe(sha256(manifests.get('estargz')!.bytes));
    expect(parsed.layers.every((l) => l.format === 'estargz' && l.tocDigestMatches)).toBe(true);
  });
});
