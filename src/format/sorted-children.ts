/**
 * A directory's children once its TOC is parsed: names and nodes in two arrays sorted by name
 * (code-unit order), looked up by binary search. A Map costs ~56 B per entry in hash table and
 * entry storage, these 16: 20 MB of a 500,000-entry TOC. Read-only: the tree is built in Maps.
 */
import type { TreeNode } from './model.js';

export class SortedChildren implements ReadonlyMap<string, TreeNode> {
  private readonly names: string[];
  private readonly nodes: TreeNode[];

  constructor(children: ReadonlyMap<string, TreeNode>) {
    const names = [...children.keys()];
    let sorted = true;
    for (let i = 1; i < names.length && sorted; i++) sorted = names[i - 1]! < names[i]!;
    if (!sorted) names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    this.names = names;
    this.nodes = names.map((n) => children.get(n)!);
  }

  get size(): number {
    return this.names.length;
  }

  private find(name: string): number {
    const names = this.names;
    let lo = 0;
    let hi = names.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const at = names[mid]!;
      if (at === name) return mid;
      if (at < name) lo = mid + 1;
      else hi = mid;
    }
    return -1;
  }

  get(name: string): TreeNode | undefined {
    const i = this.find(name);
    return i < 0 ? undefined : this.nodes[i];
  }

  has(name: string): boolean {
    return this.find(name) >= 0;
  }

  forEach(fn: (node: TreeNode, name: string, map: ReadonlyMap<string, TreeNode>) => void): void {
    for (let i = 0; i < this.names.length; i++) fn(this.nodes[i]!, this.names[i]!, this);
  }

  keys(): MapIterator<string> {
    return this.names.values();
  }

  values(): MapIterator<TreeNode> {
    return this.nodes.values();
  }

  entries(): MapIterator<[string, TreeNode]> {
    return this.names.map((n, i): [string, TreeNode] => [n, this.nodes[i]!]).values();
  }

  [Symbol.iterator](): MapIterator<[string, TreeNode]> {
    return this.entries();
  }
}
