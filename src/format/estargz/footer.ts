import { StoreError } from '../../util/errors.js';
import { inflateOneMember, parseGzipHeader } from './gzip.js';

/** Current eStargz footer: empty gzip member, FEXTRA subfield `SG` (len 22) = `%016x` + `STARGZ`. */
export const ESTARGZ_FOOTER_SIZE = 51;
/** Legacy stargz (CRFS) footer: same, but the extra field is the bare 22-byte string. */
export const LEGACY_STARGZ_FOOTER_SIZE = 47;
/** External-TOC footer (`SG`, len 17, `STARGZEXTERNALTOC`): the TOC lives in another image. */
export const EXTERNAL_TOC_FOOTER_SIZE = 46;

const MAGIC = 'STARGZ';
const EXTERNAL_MAGIC = 'STARGZEXTERNALTOC';

export interface EStargzFooter {
  tocOffset: number;
  footerSize: typeof ESTARGZ_FOOTER_SIZE | typeof LEGACY_STARGZ_FOOTER_SIZE;
}

/** Build a current (51-byte) footer; handy for tests and writers. */
export function estargzFooter(tocOffset: number): Buffer {
  const head = Buffer.from([0x1f, 0x8b, 0x08, 0x04, 0, 0, 0, 0, 0, 0xff, 26, 0, 0x53, 0x47, 22, 0]);
  const payload = Buffer.from(tocOffset.toString(16).padStart(16, '0') + MAGIC, 'ascii');
  return Buffer.concat([head, payload, Buffer.from([0x01, 0x00, 0x00, 0xff, 0xff]), Buffer.alloc(8)]);
}

/** Parse `%016x` + `STARGZ` (22 bytes) into the TOC offset. */
function parsePayload(payload: Buffer): number {
  const text = payload.toString('latin1');
  if (payload.length !== 16 + MAGIC.length || !text.endsWith(MAGIC)) {
    throw new StoreError('E_BAD_FOOTER', 'footer payload is not %016x + STARGZ');
  }
  const hex = text.slice(0, 16);
  if (!/^[0-9a-fA-F]{16}$/.test(hex)) throw new StoreError('E_BAD_FOOTER', 'footer TOC offset is not hex');
  const value = BigInt('0x' + hex);
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new StoreError('E_BAD_FOOTER', 'footer TOC offset is out of range');
  }
  return Number(value);
}

/**
 * Parse one candidate footer of the given size. The footer must be a complete, valid, empty
 * gzip member (CRC32 and ISIZE checked) whose extra field carries the TOC offset.
 */
export async function parseEStargzFooter(footer: Buffer, legacy: boolean): Promise<number> {
  const size = legacy ? LEGACY_STARGZ_FOOTER_SIZE : ESTARGZ_FOOTER_SIZE;
  if (footer.length !== size) throw new StoreError('E_BAD_FOOTER', `footer must be ${size} bytes`);
  const member = await inflateOneMember(footer, { maxOutput: 64, code: 'E_BAD_FOOTER' });
  if (member.data.length !== 0 || member.memberLength !== footer.length) {
    throw new StoreError('E_BAD_FOOTER', 'footer is not exactly one empty gzip member');
  }
  const extra = member.header.extra;
  if (extra === undefined) throw new StoreError('E_BAD_FOOTER', 'footer has no extra field');
  if (legacy) return parsePayload(extra);
  if (extra.length < 4) throw new StoreError('E_BAD_FOOTER', 'footer extra field too short');
  if (extra[0] !== 0x53 || extra[1] !== 0x47) {
    throw new StoreError('E_BAD_FOOTER', 'footer extra subfield id is not SG');
  }
  const len = extra.readUInt16LE(2);
  if (len !== 16 + MAGIC.length || extra.length !== 4 + len) {
    throw new StoreError('E_BAD_FOOTER', 'footer extra subfield has the wrong length');
  }
  return parsePayload(extra.subarray(4));
}

/** True when the last 46 bytes look like an external-TOC footer. */
export function isExternalTocFooter(footer: Buffer): boolean {
  if (footer.length !== EXTERNAL_TOC_FOOTER_SIZE) return false;
  try {
    const { extra } = parseGzipHeader(footer, 'E_BAD_FOOTER');
    return (
      extra !== undefined &&
      extra.length === 4 + EXTERNAL_MAGIC.length &&
      extra[0] === 0x53 &&
      extra[1] === 0x47 &&
      extra.readUInt16LE(2) === EXTERNAL_MAGIC.length &&
      extra.subarray(4).toString('latin1') === EXTERNAL_MAGIC
    );
  } catch {
    return false;
  }
}

/**
 * Find the eStargz footer at the end of `tail` (the last bytes of the blob): current 51-byte
 * form first, then the legacy 47-byte one, as the Go reader does. External-TOC blobs are
 * recognised and refused with E_UNSUPPORTED_FORMAT.
 */
export async function findEStargzFooter(tail: Buffer): Promise<EStargzFooter> {
  const reasons: string[] = [];
  for (const legacy of [false, true]) {
    const size = legacy ? LEGACY_STARGZ_FOOTER_SIZE : ESTARGZ_FOOTER_SIZE;
    if (tail.length < size) {
      reasons.push(`${size}-byte footer: blob too small`);
      continue;
    }
    try {
      const tocOffset = await parseEStargzFooter(tail.subarray(tail.length - size), legacy);
      return { tocOffset, footerSize: size };
    } catch (err) {
      if (!(err instanceof StoreError)) throw err;
      reasons.push(`${size}-byte footer: ${err.message}`);
    }
  }
  if (tail.length >= EXTERNAL_TOC_FOOTER_SIZE && isExternalTocFooter(tail.subarray(tail.length - 46))) {
    throw new StoreError('E_UNSUPPORTED_FORMAT', 'eStargz blob with an external TOC is not supported');
  }
  throw new StoreError('E_BAD_FOOTER', `no eStargz footer found (${reasons.join('; ')})`);
}
