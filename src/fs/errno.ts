import { StoreError, type ErrorCode, type ErrorContext } from '../util/errors.js';

/** Linux errno values (positive); fuse-native wants them negated. */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  EBADF: 9,
  EACCES: 13,
  EEXIST: 17,
  ENOTDIR: 20,
  EISDIR: 21,
  EINVAL: 22,
  EROFS: 30,
  ERANGE: 34,
  ENOSYS: 38,
  ENOTEMPTY: 39,
  ENODATA: 61,
  ETIMEDOUT: 110,
} as const;

export type ErrnoName = keyof typeof Errno;

/**
 * A StoreError that names the exact errno the FUSE edge must answer, for the few file-system answers
 * (ENOTDIR, EROFS, ERANGE ...) that have no StoreError code of their own.
 */
export class FsError extends StoreError {
  readonly errno: ErrnoName;
  constructor(errno: ErrnoName, message: string, context: ErrorContext = {}, code: ErrorCode = 'E_IO') {
    super(code, message, context);
    this.name = 'FsError';
    this.errno = errno;
  }
}

/** StoreError code -> errno. Anything unexpected is EIO: never claim "absent" for a failure. */
const byCode: Partial<Record<ErrorCode, ErrnoName>> = {
  E_NOT_FOUND: 'ENOENT',
  E_INVALID_ARGUMENT: 'EINVAL',
  E_BAD_REFERENCE: 'EINVAL',
  E_HOSTILE_PATH: 'EINVAL',
};

export function errnoFor(err: unknown): ErrnoName {
  if (err instanceof FsError) return err.errno;
  if (err instanceof StoreError) return byCode[err.code] ?? 'EIO';
  return 'EIO';
}
