import { spawn } from 'node:child_process';

/**
 * Probing a FUSE mount served by THIS process must happen in another process (a synchronous call
 * from the serving process would deadlock it). `probe` runs a small python3 script (an independent
 * implementation of the syscalls, not our code) and returns one JSON result per operation:
 * either the value or {"errno": "ENOENT"}.
 */
export type ProbeOp =
  | { op: 'stat'; path: string }
  | { op: 'lstat'; path: string }
  | { op: 'readdir'; path: string }
  | { op: 'read'; path: string; offset?: number; length?: number }
  | { op: 'sha256'; path: string }
  | { op: 'readlink'; path: string }
  | { op: 'getxattr'; path: string; name: string; size?: number }
  | { op: 'listxattr'; path: string }
  | { op: 'create'; path: string }
  | { op: 'rmdir'; path: string }
  | { op: 'mkdir'; path: string }
  | { op: 'unlink'; path: string }
  | { op: 'access'; path: string }
  | { op: 'statvfs'; path: string };

export interface StatResult {
  mode: number;
  ino: number;
  nlink: number;
  size: number;
  uid: number;
  gid: number;
  rdev: number;
  rdevMajor: number;
  rdevMinor: number;
  mtime: number;
}

export type ProbeResult = { errno: string } | Record<string, unknown> | unknown;

const SCRIPT = String.raw`
import sys, os, json, errno, hashlib, ctypes, ctypes.util, stat as st, time
libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)
class Dirent(ctypes.Structure):
    _fields_ = [('d_ino', ctypes.c_uint64), ('d_off', ctypes.c_int64), ('d_reclen', ctypes.c_ushort),
                ('d_type', ctypes.c_ubyte), ('d_name', ctypes.c_char * 256)]
libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir.restype = ctypes.POINTER(Dirent)
libc.readdir.argtypes = [ctypes.c_void_p]
libc.closedir.argtypes = [ctypes.c_void_p]
libc.getxattr.restype = ctypes.c_ssize_t
libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
DT = {0: 'unknown', 1: 'fifo', 2: 'chr', 4: 'dir', 6: 'blk', 8: 'reg', 10: 'lnk', 12: 'sock'}
def stat_res(s):
    return {'mode': s.st_mode, 'ino': s.st_ino, 'nlink': s.st_nlink, 'size': s.st_size, 'uid': s.st_uid,
            'gid': s.st_gid, 'rdev': s.st_rdev, 'rdevMajor': os.major(s.st_rdev), 'rdevMinor': os.minor(s.st_rdev),
            'mtime': int(s.st_mtime)}
def err(e):
    return {'errno': errno.errorcode.get(e, str(e)), 'ms': 0}
def run(o):
    p = o['path']; k = o['op']
    if k == 'stat': return stat_res(os.stat(p))
    if k == 'lstat': return stat_res(os.lstat(p))
    if k == 'readdir':
        d = libc.opendir(p.encode())
        if not d: raise OSError(ctypes.get_errno(), 'opendir')
        out = []
        while True:
            ctypes.set_errno(0)
            e = libc.readdir(d)
            if not e:
                n = ctypes.get_errno()
                libc.closedir(d)
                if n: raise OSError(n, 'readdir')
                break
            out.append({'name': e.contents.d_name.decode('utf-8', 'surrogateescape'), 'type': DT.get(e.contents.d_type, str(e.contents.d_type)), 'ino': e.contents.d_ino})
        return sorted(out, key=lambda x: x['name'])
    if k == 'read':
        fd = os.open(p, os.O_RDONLY)
        try:
            data = os.pread(fd, o.get('length', 1 << 30), o.get('offset', 0)) if 'length' in o else b''.join(iter(lambda: os.read(fd, 1 << 20), b''))
        finally: os.close(fd)
        return {'hex': data.hex(), 'length': len(data)}
    if k == 'sha256':
        h = hashlib.sha256(); n = 0
        with open(p, 'rb') as f:
            while True:
                b = f.read(1 << 20)
                if not b: break
                h.update(b); n += len(b)
        return {'sha256': 'sha256:' + h.hexdigest(), 'length': n}
    if k == 'readlink': return os.readlink(p)
    if k == 'getxattr':
        if 'size' in o:
            buf = ctypes.create_string_buffer(max(o['size'], 1))
            r = libc.getxattr(p.encode(), o['name'].encode(), buf if o['size'] > 0 else None, o['size'])
            if r < 0: raise OSError(ctypes.get_errno(), 'getxattr')
            return {'size': r, 'value': buf.raw[:r].decode('latin-1') if o['size'] > 0 else None}
        return os.getxattr(p, o['name']).decode('latin-1')
    if k == 'listxattr': return os.listxattr(p)
    if k == 'create':
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666); os.close(fd); return 'created'
    if k == 'rmdir': os.rmdir(p); return 'ok'
    if k == 'mkdir': os.mkdir(p); return 'ok'
    if k == 'unlink': os.unlink(p); return 'ok'
    if k == 'access': return os.access(p, os.F_OK, effective_ids=True)
    if k == 'statvfs':
        s = os.statvfs(p); return {'bsize': s.f_bsize, 'namemax': s.f_namemax, 'blocks': s.f_blocks}
    raise ValueError(k)
res = []
for o in json.loads(sys.stdin.read()):
    t = time.monotonic()
    try:
        res.append(run(o))
    except OSError as e:
        r = err(e.errno); r['ms'] = int((time.monotonic() - t) * 1000); res.append(r)
print(json.dumps(res))
`;

/** Run probes in a python3 child; fails loudly if python3 is missing or the child times out. */
export async function probe(ops: ProbeOp[], timeoutMs = 60_000): Promise<ProbeResult[]> {
  const out = await runChild('python3', ['-c', SCRIPT], JSON.stringify(ops), timeoutMs);
  if (out.code !== 0) throw new Error(`probe failed (${out.code}): ${out.stderr}`);
  return JSON.parse(out.stdout) as ProbeResult[];
}

export async function probeOne<T = ProbeResult>(op: ProbeOp, timeoutMs?: number): Promise<T> {
  const [r] = await probe([op], timeoutMs);
  return r as T;
}

export interface ChildResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Spawn a child asynchronously (never spawnSync: this process may be serving the mount). */
export function runChild(
  cmd: string,
  args: string[],
  stdin = '',
  timeoutMs = 60_000,
  env?: NodeJS.ProcessEnv,
): Promise<ChildResult> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], env: env ?? process.env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${cmd} ${args.join(' ')} timed out after ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - t0 });
    });
    // a child that does not read stdin may exit first: EPIPE is not an error here
    child.stdin.on('error', () => undefined);
    child.stdin.end(stdin);
  });
}
