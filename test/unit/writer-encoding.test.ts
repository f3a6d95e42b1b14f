import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { goJson, goQuote } from '../../src/format/writer/go-json.js';
import { Crc64Iso } from '../../src/format/writer/tar-split.js';
import { buildLayer } from '../../src/format/writer/index.js';

// Writer encodings checked in Node only; inputs made by GNU tar and python are in
// test/integration/writer-encoding.test.ts.
describe('Go-compatible JSON', () => {
  it('escapes like encoding/json with HTML escaping (documented Go behaviour)', () => {
    expect(goQuote('<a href="x">&</a>')).toBe('"\\u003ca href=\\"x\\"\\u003e\\u0026\\u003c/a\\u003e"');
    expect(goQuote('tab\tnl\ncr\rbs\\')).toBe('"tab\\tnl\\ncr\\rbs\\\\"');
    expect(goQuote('\u0001\u001f\u007f')).toBe('"\\u0001\\u001f\u007f"');
    expect(goQuote('\u2028\u2029')).toBe('"\\u2028\\u2029"');
    expect(goQuote('ünïcødé-文件-😀')).toBe('"ünïcødé-文件-😀"');
    expect(goQuote('bad\ud800x')).toBe('"bad\\ufffdx"');
  });

  it('MarshalIndent layout, omitted undefined fields, sorted map keys', () => {
    const v = {
      version: 1,
      entries: [
        {
          name: 'a',
          size: undefined,
          xattrs: new Map([
            ['b', 'x'],
            ['B', 'y'],
            ['a', 'z'],
          ]),
        },
      ],
      empty: [],
      none: new Map(),
    };
    expect(goJson(v, '\t')).toBe(
      '{\n\t"version": 1,\n\t"entries": [\n\t\t{\n\t\t\t"name": "a",\n\t\t\t"xattrs": {\n\t\t\t\t"B": "y",\n' +
        '\t\t\t\t"a": "z",\n\t\t\t\t"b": "x"\n\t\t\t}\n\t\t}\n\t],\n\t"empty": [],\n\t"none": {}\n}',
    );
    expect(goJson(v)).toBe(
      '{"version":1,"entries":[{"name":"a","xattrs":{"B":"y","a":"z","b":"x"}}],"empty":[],"none":{}}',
    );
    // whatever we emit is valid JSON
    expect(JSON.parse(goJson(v, '\t'))).toMatchObject({ version: 1 });
  });
});

describe('CRC-64/GO-ISO (tar-split file checksums)', () => {
  it('matches the catalogue check value and is incremental', () => {
    expect(new Crc64Iso().update(Buffer.from('123456789')).digest().toString('hex')).toBe('b90956c775a41001');
    expect(new Crc64Iso().digest().toString('hex')).toBe('0000000000000000');
    const data = Buffer.from('The quick brown fox jumps over the lazy dog, again and again.');
    const whole = new Crc64Iso().update(data).digest();
    for (const cut of [1, 7, 8, 9, 33]) {
      expect(new Crc64Iso().update(data.subarray(0, cut)).update(data.subarray(cut)).digest()).toEqual(whole);
    }
  });
});

describe('failures', () => {
  it('a failing input stream is E_IO and the output stream is destroyed', async () => {
    const src = new Readable({
      read() {
        this.destroy(new Error('network went away'));
      },
    });
    const out = new PassThrough();
    await expect(buildLayer(src, out, { format: 'zstd:chunked' })).rejects.toMatchObject({ code: 'E_IO' });
    expect(out.destroyed).toBe(true);
  });
});
