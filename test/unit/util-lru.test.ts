import { describe, expect, it } from 'vitest';
import { Lru } from '../../src/util/lru.js';

describe('Lru', () => {
  it('evicts the least recently used: a get refreshes, a peek does not', () => {
    const m = new Lru<string, number>({ maxEntries: 3 });
    m.set('a', 1);
    m.set('b', 2);
    m.set('c', 3);
    expect(m.get('a')).toBe(1); // a is now the most recent
    expect(m.peek('b')).toBe(2); // b stays the least recent
    m.set('d', 4);
    expect([...m.keys()]).toEqual(['c', 'a', 'd']);
    expect(m.has('b')).toBe(false);
  });

  it('bounds the summed size and keeps it exact across replace and delete', () => {
    const m = new Lru<string, Buffer>({ maxSize: 10, sizeOf: (b) => b.length });
    m.set('x', Buffer.alloc(4));
    m.set('y', Buffer.alloc(4));
    m.set('x', Buffer.alloc(2)); // replace: 6 bytes, x newest
    expect(m.totalSize).toBe(6);
    m.set('z', Buffer.alloc(5)); // 11 > 10: y (least recent) goes
    expect([...m.keys()]).toEqual(['x', 'z']);
    expect(m.totalSize).toBe(7);
    expect(m.delete('x')).toBe(true);
    expect(m.totalSize).toBe(5);
    m.clear();
    expect(m.size).toBe(0);
    expect(m.totalSize).toBe(0);
  });

  it('holds a large entry bound exactly, without allocating it up front', () => {
    const bound = 50_000;
    const heapBefore = process.memoryUsage().heapUsed + process.memoryUsage().arrayBuffers;
    const m = new Lru<number, number>({ maxEntries: bound });
    // preallocated slots would be ~1.5 MB for this bound; growing on demand costs nothing yet
    expect(process.memoryUsage().heapUsed + process.memoryUsage().arrayBuffers - heapBefore).toBeLessThan(
      500_000,
    );
    for (let i = 0; i < bound; i++) m.set(i, i);
    expect(m.size).toBe(bound);
    expect(m.totalSize).toBe(bound);
    expect(m.get(0)).toBe(0); // 0 is now the most recent; 1 the least
    m.set(bound, bound);
    expect(m.size).toBe(bound);
    expect(m.has(1)).toBe(false);
    expect(m.has(0)).toBe(true);
    expect([...m.keys()].slice(0, 2)).toEqual([2, 3]);
  });

  it('expires entries by the injected clock', () => {
    let now = 0;
    const m = new Lru<string, string>({ maxEntries: 8, now: () => now });
    m.set('t', 'v', 10);
    m.set('forever', 'w');
    now = 9;
    expect(m.get('t')).toBe('v');
    now = 10;
    expect(m.get('t')).toBeUndefined();
    expect(m.size).toBe(1);
    expect(m.get('forever')).toBe('w');
  });

  it('refuses to be unbounded, and does not keep an entry that is already expired', () => {
    expect(() => new Lru<string, string>({})).toThrow(/maxEntries or maxSize/);
    let now = 100;
    const m = new Lru<string, string>({ maxEntries: 2, now: () => now });
    m.set('old', 'v', 100);
    expect(m.has('old')).toBe(false);
    m.set('a', 'x', 150);
    m.set('b', 'y');
    now = 200;
    m.sweep();
    expect([...m.keys()]).toEqual(['b']);
  });

  it('counts an empty value as size 1 under a size bound', () => {
    const m = new Lru<string, Buffer>({ maxSize: 2, sizeOf: (b) => b.length });
    m.set('e', Buffer.alloc(0));
    m.set('f', Buffer.alloc(1));
    expect(m.totalSize).toBe(2);
    expect([...m.entries()].map(([k]) => k)).toEqual(['e', 'f']);
  });

  it('hands every value that leaves (evicted, deleted, replaced, cleared) to onRemove once', () => {
    const removed: string[] = [];
    const m = new Lru<string, string>({ maxEntries: 2, onRemove: (v) => removed.push(v) });
    m.set('a', 'A');
    m.set('b', 'B');
    m.set('c', 'C'); // evicts a
    m.delete('b');
    m.set('c', 'C2'); // replaces C
    expect(removed).toEqual(['A', 'B', 'C']);
    m.clear();
    expect(removed).toEqual(['A', 'B', 'C', 'C2']);
  });
});
