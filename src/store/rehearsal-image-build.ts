import { createHash } from 'node:crypto';
import { buildLayerBuffer } from '../format/writer/index.js';
import {
  encodeHeader,
  padding,
  simpleFileHeader,
  TYPE_DIR,
  TYPE_SYMLINK,
} from '../format/writer/tar-header.js';
import { MEDIA_OCI_MANIFEST } from '../registry/manifest.js';
import type { RehearsalImage } from './rehearsal-image.js';

/**
 * Builds the rehearsal image: one eStargz and one zstd:chunked layer of the same tree, shaped like
 * real layers (directories, small files, symlinks, a file of several chunks), with its config and
 * OCI manifest. For `node scripts/rehearsal-image.js` and the test only (see rehearsal-image.ts).
 */

const CHUNK_SIZE = 16 * 1024;
const CHUNKED_FILE = 'usr/share/rehearsal/data.bin';
const MTIME = 1_700_000_000;

function sha256(b: Buffer): string {
  return 'sha256:' + createHash('sha256').update(b).digest('hex');
}

/** A tar of `files` small files in directories of 32, a symlink every 17 files, one chunked file. */
function rehearsalTar(files: number): Buffer {
  const out: Buffer[] = [];
  const entry = (name: string, typeflag: string, mode: number, data?: Buffer, linkname = ''): void => {
    const h = { ...simpleFileHeader(name, data?.length ?? 0), typeflag, mode, linkname, mtime: MTIME };
    out.push(encodeHeader({ ...h, uname: 'root', gname: 'root' }));
    if (data !== undefined && data.length > 0) out.push(data, Buffer.alloc(padding(data.length)));
  };
  entry('usr/', TYPE_DIR, 0o755);
  entry('usr/lib/', TYPE_DIR, 0o755);
  for (let i = 0; i < files; i++) {
    const dir = `usr/lib/pkg${i >> 5}/`;
    if ((i & 31) === 0) entry(dir, TYPE_DIR, 0o755);
    if (i % 17 === 16) entry(`${dir}link${i}`, TYPE_SYMLINK, 0o777, undefined, `file${i - 1}`);
    else entry(`${dir}file${i}`, '0', 0o644, Buffer.from(`rehearsal file ${i}\n`.repeat(1 + (i % 5))));
  }
  entry('usr/share/', TYPE_DIR, 0o755);
  entry('usr/share/rehearsal/', TYPE_DIR, 0o755);
  const data = Buffer.alloc(4 * CHUNK_SIZE + 1000);
  for (let i = 0; i < data.length; i++) data[i] = (i * 31 + (i >> 9)) & 0xff;
  entry(CHUNKED_FILE, '0', 0o644, data);
  out.push(Buffer.alloc(1024));
  return Buffer.concat(out);
}

/** Build the image (the generator script and the test; the store loads the saved copy). */
export async function buildRehearsalImage(files = 300): Promise<RehearsalImage> {
  const tar = rehearsalTar(files);
  const built = [
    await buildLayerBuffer(tar, { format: 'estargz', chunkSize: CHUNK_SIZE }),
    await buildLayerBuffer(tar, { format: 'zstd:chunked', chunkSize: CHUNK_SIZE }),
  ];
  // the platform of a plain manifest's config is never checked: a fixed one keeps the saved copy
  // the same on every node
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      rootfs: { type: 'layers', diff_ids: built.map((b) => b.diffID) },
    }),
  );
  const configDigest = sha256(config);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA_OCI_MANIFEST,
      config: {
        mediaType: 'application/vnd.oci.image.config.v1+json',
        digest: configDigest,
        size: config.length,
      },
      layers: built.map((b) => ({
        mediaType: b.mediaType,
        digest: b.blobDigest,
        size: b.size,
        annotations: b.annotations,
      })),
    }),
  );
  const blobs = new Map<string, Buffer>([[configDigest, config]]);
  for (const b of built) blobs.set(b.blobDigest, b.blob);
  return { manifest, blobs, layers: built.map((b) => ({ digest: b.blobDigest, chunkedFile: CHUNKED_FILE })) };
}
