import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { configTables, renderConfigDocs } from '../../src/store/config/docs.js';
import { buildConfig } from '../../src/store/config/load.js';

const repoFile = (p: string) => readFile(new URL(`../../${p}`, import.meta.url), 'utf8');
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('config docs come from the schema', () => {
  it('docs/config.md is what `npm run docs:config` renders from the schema', async () => {
    expect(await repoFile('docs/config.md')).toBe(renderConfigDocs());
  });

  it('lists every table and key the loader accepts: a documented key never warns as unknown', () => {
    const tables = configTables();
    const headers = tables.map((t) => t.header);
    expect(headers).toEqual(
      expect.arrayContaining([
        'top level',
        '[blob]',
        '[cache]',
        '[deadlines]',
        '[platform]',
        '[registry]',
        '[debug]',
        '[resolver.host."<host>"]',
        '[[resolver.host."<host>".mirrors]]',
      ]),
    );
    for (const t of tables) {
      expect(t.keys.length).toBeGreaterThan(0);
      for (const k of t.keys) expect(k.doc, `${t.header} ${k.key}`).not.toBe('');
    }
    // the documented defaults are the loader's defaults
    const cache = tables.find((t) => t.header === '[cache]')!;
    const { config } = buildConfig(undefined, { mountpoint: '/m' });
    expect(cache.keys.map((k) => Number(k.default))).toEqual([
      config.cache.maxBytes,
      config.cache.minFreeBytes,
      config.cache.memoryBytes,
    ]);
  });

  it('systemd/config.toml shows every table and key of the schema (set or commented out)', async () => {
    const example = await repoFile('systemd/config.toml');
    const missing: string[] = [];
    for (const t of configTables()) {
      if (t.header !== 'top level') {
        const h = escape(t.header).replace(/"<host>"/g, '"[^"]+"');
        if (!new RegExp(`^#? ?${h}`, 'm').test(example)) missing.push(t.header);
      }
      for (const k of t.keys) {
        if (!new RegExp(`^#? ?${escape(k.key)} = `, 'm').test(example)) missing.push(`${t.header} ${k.key}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
