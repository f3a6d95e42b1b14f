/**
 * Streaming reader of a TOC JSON document (`{"version":1,"entries":[{...},...],...}`), fed in
 * pieces as the TOC is decompressed. It never holds the whole document: the structure around
 * the entries is checked byte by byte, entries are cut at their boundaries and handed out as
 * parsed batches (one JSON.parse per pushed piece, see fastCut), so memory stays bounded by one
 * batch and the entry cap stops the document within one piece of crossing it, before any entry
 * past the cap is handed out.
 *
 * Top-level keys match case-insensitively (Go's encoding/json). A second `entries` key is
 * refused rather than replacing the first (no writer emits one). Values of other top-level keys
 * are kept (bounded) and JSON-parsed, so the whole document is still checked as JSON.
 */
import { StoreError } from '../util/errors.js';

/** Largest value of a top-level key other than `entries` (version, tarSplitDigest, unknown). */
const MAX_FIELD_BYTES = 1 << 20;
/** Entries are parsed in batches of about this many bytes. */
const BATCH_BYTES = 64 * 1024;
/**
 * A fast cut (see TocScanner.fastCut) takes at most this many bytes of one pushed piece. Kept well
 * under V8's largest regular heap object (128 KiB): a longer text becomes a large-object string,
 * allocated in the old generation, and a TOC's worth of them brings full collections in the
 * middle of a parse. Measured in fresh processes (10 runs each, the lab's large image, base
 * layers): first parse eStargz 50 vs 62.5 ms, zstd:chunked 72.5 vs 86 with 256 KiB cuts.
 */
const FAST_BYTES = 64 * 1024;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const LBRACE = 0x7b;
const RBRACE = 0x7d;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

const enum S {
  Start,
  KeyOrEnd,
  Key,
  InKey,
  Colon,
  Value,
  InValue,
  CommaOrEnd,
  Done,
  ArrValueOrEnd,
  ArrValue,
  InEntry,
  ArrCommaOrEnd,
}

/**
 * Skip through an entry object from `from`: the index of its closing brace, -1 when it goes on
 * past the end of `chunk`. `st` carries the state across chunks. Nesting is not limited: values
 * inside an entry are parsed by JSON.parse (not recursive in V8) and unknown keys are ignored.
 */
function skipEntry(chunk: Uint8Array, from: number, st: Int32Array): number {
  // byte values as literals: module-level consts cost a context load and a TDZ check per use,
  // which made this loop several times slower
  let inString = st[0] === 1;
  let escaped = st[1] === 1;
  let depth = st[2]!;
  const n = chunk.length;
  let end = -1;
  for (let j = from; j < n; j++) {
    const b = chunk[j]!;
    if (inString) {
      if (escaped) escaped = false;
      else if (b === 0x5c /* \\ */) escaped = true;
      else if (b === 0x22 /* " */) inString = false;
    } else if (b === 0x22 /* " */) inString = true;
    else if (b === 0x7b /* { */ || b === 0x5b /* [ */) depth++;
    else if ((b === 0x7d /* } */ || b === 0x5d) /* ] */ && --depth === 0) {
      end = j;
      break;
    }
  }
  st[0] = inString ? 1 : 0;
  st[1] = escaped ? 1 : 0;
  st[2] = depth;
  return end;
}

function isWs(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/**
 * The `}` of the last `}` ws* `,` ws* `{` whose `}` lies at or after `from` and whose `{` lies at
 * or before `last`, or -1. Candidates are found with lastIndexOf (native); each is checked by
 * stepping back over whitespace only.
 */
function lastEntryGap(chunk: Buffer, from: number, last: number): number {
  let at = last;
  while (at > from) {
    const open = chunk.lastIndexOf(0x7b /* { */, at);
    if (open <= from) return -1;
    let k = open - 1;
    while (k > from && isWs(chunk[k]!)) k--;
    if (chunk[k] === 0x2c /* , */) {
      k--;
      while (k >= from && isWs(chunk[k]!)) k--;
      if (k >= from && chunk[k] === 0x7d /* } */) return k;
    }
    at = open - 1;
  }
  return -1;
}

function invalid(why: string): StoreError {
  return new StoreError('E_BAD_TOC', `TOC is not valid JSON: ${why}`);
}

export interface TocTopLevel {
  version: unknown;
  tarSplitDigest: unknown;
  /** `entries` was an array, absent/null (= no entries). Anything else throws while scanning. */
  entriesKind: 'array' | 'absent';
  count: number;
}

/** Growable byte collector for pieces of one value that may span several input chunks. */
class Pieces {
  private parts: Buffer[] = [];
  length = 0;
  add(b: Buffer): void {
    if (b.length === 0) return;
    // input chunks may be reused by the producer: keep a copy
    this.parts.push(Buffer.from(b));
    this.length += b.length;
  }
  take(tail?: Buffer): Buffer {
    const out = this.peek(tail);
    this.clear();
    return out;
  }
  clear(): void {
    this.parts = [];
    this.length = 0;
  }
  /** The bytes collected so far (and `tail`), without letting go of them. */
  peek(tail?: Buffer): Buffer {
    const all = tail === undefined ? this.parts : [...this.parts, tail];
    return all.length === 1 ? all[0]! : all.length === 0 ? Buffer.alloc(0) : Buffer.concat(all);
  }
}

export class TocScanner {
  private state = S.Start;
  /** Inside a string (key, value or entry), and whether the previous byte was a backslash. */
  private inString = false;
  private escaped = false;
  /** Nesting depth inside the current value/entry. */
  private depth = 0;
  /** Inside an entry: [in a string, after a backslash, depth] (see skipEntry). */
  private readonly entryState = new Int32Array(3);
  private readonly key = new Pieces();
  private keyName = '';
  private readonly value = new Pieces();
  private valueIsEntries = false;
  private sawEntries = false;
  private readonly batch = new Pieces();
  /** Start of the open batch within the current chunk (-1: none open in this chunk). */
  private batchFrom = -1;
  private batchOpen = false;
  private batchCount = 0;
  private count = 0;
  private firstOfBatch = 0;
  private top: { version: unknown; tarSplitDigest: unknown; entries: 'array' | 'absent' } = {
    version: undefined,
    tarSplitDigest: undefined,
    entries: 'absent',
  };

  constructor(
    private readonly maxEntries: number,
    /** Called with each parsed batch of raw entries and the index of its first entry. */
    private readonly onBatch: (entries: unknown[], first: number) => void,
  ) {}

  /** Feed the next bytes. Throws E_BAD_TOC on malformed JSON, E_TOO_MANY_ENTRIES past the cap. */
  push(chunk: Buffer): void {
    const n = chunk.length;
    let i = 0;
    let keyFrom = this.state === S.InKey ? 0 : -1;
    let valueFrom = this.state === S.InValue ? 0 : -1;
    this.batchFrom = this.batchOpen ? 0 : -1;
    let fast = true;
    while (i < n) {
      const c = chunk[i]!;
      switch (this.state) {
        case S.InEntry: {
          if (fast) {
            const cut = this.fastCut(chunk, i);
            if (cut > 0) {
              i = cut; // just after the last entry taken: whitespace, then its comma
              this.state = S.ArrCommaOrEnd;
              continue;
            }
            fast = false; // exact scanning for the rest of this piece
          }
          // the hot loop, in a small function of its own so it optimises well
          const st = this.entryState;
          const end = skipEntry(chunk, i, st);
          if (end < 0) {
            i = n; // the entry goes on in the next chunk
            continue;
          }
          this.state = S.ArrCommaOrEnd;
          this.batchCount++;
          if (this.batch.length + (end + 1 - this.batchFrom) >= BATCH_BYTES) this.flushBatch(chunk, end + 1);
          i = end + 1;
          continue;
        }
        case S.InKey:
        case S.InValue: {
          if (this.inString) {
            if (this.escaped) this.escaped = false;
            else if (c === BACKSLASH) this.escaped = true;
            else if (c === QUOTE) {
              this.inString = false;
              if (this.state === S.InKey) {
                this.key.add(chunk.subarray(keyFrom, i + 1));
                this.endKey();
                keyFrom = -1;
                i++;
                continue;
              }
              if (this.depth === 0) {
                this.value.add(chunk.subarray(valueFrom, i + 1));
                valueFrom = -1;
                this.endValue();
                i++;
                continue;
              }
            }
          } else if (c === QUOTE) this.inString = true;
          else if (c === LBRACE || c === LBRACKET) this.depth++;
          else if (c === RBRACE || c === RBRACKET || c === COMMA || isWs(c)) {
            // scalars end at a delimiter (not part of them); containers at their closing bracket
            if (this.depth === 0) {
              this.value.add(chunk.subarray(valueFrom, i));
              valueFrom = -1;
              this.endValue();
              continue; // the delimiter is looked at again in CommaOrEnd
            }
            if ((c === RBRACE || c === RBRACKET) && --this.depth === 0) {
              this.value.add(chunk.subarray(valueFrom, i + 1));
              valueFrom = -1;
              this.endValue();
              i++;
              continue;
            }
          }
          if (this.state === S.InValue && this.value.length + (i - valueFrom) > MAX_FIELD_BYTES) {
            throw new StoreError('E_BAD_TOC', `TOC field ${JSON.stringify(this.keyName)} is too large`);
          }
          if (this.state === S.InKey && this.key.length + (i - keyFrom) > MAX_FIELD_BYTES) {
            throw invalid('key too long');
          }
          i++;
          continue;
        }
      }
      if (isWs(c)) {
        i++;
        continue;
      }
      switch (this.state) {
        case S.Start:
          if (c !== LBRACE) throw new StoreError('E_BAD_TOC', 'TOC is not a JSON object');
          this.state = S.KeyOrEnd;
          break;
        case S.KeyOrEnd:
        case S.Key:
          if (c === RBRACE && this.state === S.KeyOrEnd) this.state = S.Done;
          else if (c === QUOTE) {
            this.state = S.InKey;
            this.inString = true;
            keyFrom = i;
          } else throw invalid('expected a key');
          break;
        case S.Colon:
          if (c !== COLON) throw invalid('expected a colon');
          this.state = S.Value;
          break;
        case S.Value:
          if (this.valueIsEntries && c === LBRACKET) {
            if (this.sawEntries) throw new StoreError('E_BAD_TOC', 'TOC has more than one entries key');
            this.sawEntries = true;
            this.top.entries = 'array';
            this.state = S.ArrValueOrEnd;
            break;
          }
          this.state = S.InValue;
          this.depth = 0;
          valueFrom = i;
          if (c === QUOTE) this.inString = true;
          else if (c === LBRACE || c === LBRACKET) this.depth = 1;
          else if (c === RBRACE || c === COMMA) throw invalid('expected a value');
          break;
        case S.CommaOrEnd:
          if (c === COMMA) this.state = S.Key;
          else if (c === RBRACE) this.state = S.Done;
          else throw invalid('expected a comma or the end of the object');
          break;
        case S.Done:
          throw invalid('unexpected data after the end');
        case S.ArrValueOrEnd:
        case S.ArrValue:
          if (c === RBRACKET && this.state === S.ArrValueOrEnd) {
            this.state = S.CommaOrEnd;
            break;
          }
          if (c !== LBRACE) {
            if (c === RBRACKET) throw invalid('trailing comma in entries');
            throw new StoreError('E_BAD_TOC', `TOC entry ${this.count}: not an object`, {
              entry: this.count,
            });
          }
          this.count++;
          this.checkCount();
          if (!this.batchOpen) {
            this.batchOpen = true;
            this.batchFrom = i;
            this.firstOfBatch = this.count - 1;
          }
          this.state = S.InEntry;
          this.entryState[0] = 0;
          this.entryState[1] = 0;
          this.entryState[2] = 1;
          break;
        case S.ArrCommaOrEnd:
          if (c === COMMA) this.state = S.ArrValue;
          else if (c === RBRACKET) {
            // whitespace before the `]` may stay in the batch text: JSON allows it there
            if (this.batchOpen) this.flushBatch(chunk, i);
            this.state = S.CommaOrEnd;
          } else throw invalid('expected a comma or the end of entries');
          break;
      }
      i++;
    }
    // carry partial key/value/batch bytes over to the next chunk
    if (keyFrom >= 0) this.key.add(chunk.subarray(keyFrom));
    if (valueFrom >= 0) this.value.add(chunk.subarray(valueFrom));
    if (this.batchOpen && this.batchFrom >= 0) this.batch.add(chunk.subarray(this.batchFrom));
  }

  /**
   * Inside an entry of the open batch: try to take the batch up to the last entry boundary of this
   * piece (within FAST_BYTES) with one JSON.parse, instead of scanning its bytes one by one -- the
   * scan cost as much as the parse. A boundary is `}` `,` `{` with any whitespace between: compact
   * writers emit `},{`, the Go eStargz writer indents with tabs (`},\n\t\t{`). A successful parse
   * proves the cut is an entry boundary: JSON is read the same way whatever follows, and text cut
   * inside a string or a nested value cannot parse as a list of values. Returns the index right
   * after the cut (whitespace, then the comma, follow), or 0 when there is no boundary or the
   * text does not parse (a name containing one, malformed JSON): the exact scan then goes on from
   * where it was, and reports errors as usual.
   */
  private fastCut(chunk: Buffer, from: number): number {
    const close = lastEntryGap(chunk, from, Math.min(chunk.length, from + FAST_BYTES) - 1);
    if (close < 0) return 0;
    const text = this.batch.peek(chunk.subarray(Math.max(this.batchFrom, 0), close + 1));
    let parsed: unknown[];
    try {
      parsed = JSON.parse(`[${text.toString('utf8')}]`) as unknown[];
    } catch {
      return 0;
    }
    this.batch.clear();
    // entries counted so far include the batch's; the cut may have taken more
    this.count = this.firstOfBatch + parsed.length;
    this.checkCount();
    this.batchCount = parsed.length;
    this.handOut(parsed);
    return close + 1;
  }

  private checkCount(): void {
    if (this.count > this.maxEntries) {
      throw new StoreError(
        'E_TOO_MANY_ENTRIES',
        `TOC has more entries than the limit of ${this.maxEntries} (max_toc_entries)`,
        { limit: this.maxEntries },
      );
    }
  }

  private flushBatch(chunk: Buffer, end: number): void {
    // batchFrom is 0 when the batch began in an earlier chunk (its bytes are carried)
    const text = this.batch.take(chunk.subarray(this.batchFrom, end));
    let parsed: unknown[];
    try {
      parsed = JSON.parse(`[${text.toString('utf8')}]`) as unknown[];
    } catch (err) {
      throw invalid(
        `entries ${this.firstOfBatch}-${this.firstOfBatch + this.batchCount - 1}: ${(err as Error).message}`,
      );
    }
    if (parsed.length !== this.batchCount) throw invalid('entries are not separated by commas');
    this.handOut(parsed);
  }

  /** The open batch was parsed: hand it out; the next entry starts a new batch. */
  private handOut(parsed: unknown[]): void {
    const first = this.firstOfBatch;
    this.batchOpen = false;
    this.batchFrom = -1;
    this.batchCount = 0;
    this.onBatch(parsed, first);
  }

  private endKey(): void {
    let name: unknown;
    try {
      name = JSON.parse(this.key.take().toString('utf8'));
    } catch (err) {
      throw invalid(`bad key: ${(err as Error).message}`);
    }
    this.keyName = String(name);
    this.valueIsEntries = this.keyName.toLowerCase() === 'entries';
    this.state = S.Colon;
  }

  private endValue(): void {
    let value: unknown;
    try {
      value = JSON.parse(this.value.take().toString('utf8'));
    } catch (err) {
      throw invalid(`bad value of ${JSON.stringify(this.keyName)}: ${(err as Error).message}`);
    }
    const k = this.keyName.toLowerCase();
    if (k === 'entries') {
      if (value !== null) throw new StoreError('E_BAD_TOC', 'TOC entries is not an array');
      if (this.sawEntries) throw new StoreError('E_BAD_TOC', 'TOC has more than one entries key');
      this.sawEntries = true;
    } else if (k === 'version') this.top.version = value;
    else if (k === 'tarsplitdigest') this.top.tarSplitDigest = value;
    this.state = S.CommaOrEnd;
  }

  /** The document ended: check it was complete and return the top-level fields. */
  end(): TocTopLevel {
    if (this.state !== S.Done) {
      throw this.state === S.Start
        ? new StoreError('E_BAD_TOC', 'TOC is not a JSON object')
        : invalid('unexpected end');
    }
    return {
      version: this.top.version,
      tarSplitDigest: this.top.tarSplitDigest,
      entriesKind: this.top.entries,
      count: this.count,
    };
  }

  /** Entries seen so far. */
  get entries(): number {
    return this.count;
  }
}
