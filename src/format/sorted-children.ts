/**
 * A directory's children: names and nodes in two arrays sorted by name (code-unit order),
 * looked up by binary search. A Map costs ~56 B per entry in hash table and entry storage, these
 * 16: 20 MB of a 500,000-entry TOC. While the tree is built, names that arrive in order (tar
 * order is sorted) are appended; the builder turns a directory whose names do not into a Map
 * and back (from()) when it is done. Once fixed, read-only.
 */
import type { TreeNode } from './model.js';

export class SortedChildren implements ReadonlyMap<string, TreeNode> {
  private names: string[];
  private nodes: TreeNode[];
  private fixed = false;

  constructor(names: string[] = [], nodes: TreeNode[] = []) {
    this.names = names;
    this.nodes = nodes;
  }

  /** A fixed copy of `children`, in name order. */
  static from(children: ReadonlyMap<string, TreeNode>): SortedChildren {
    const names = [...children.keys()];
    let sorted = true;
    for (let i = 1; i < names.length && sorted; i++) sorted = names[i - 1]! < names[i]!;
    if (!sorted) names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const out = new SortedChildren(
      names,
      names.map((n) => children.get(n)!),
    );
    out.fixed = true;
    return out;
  }

  /**
   * While building: replace the node of a known name, or append a name after the last one.
   * False for a new name that would go anywhere else (the caller keeps a Map instead).
   */
  trySet(name: string, node: TreeNode): boolean {
    if (this.fixed) throw new TypeError('the children of a finished directory are fixed');
    const last = this.names.length - 1;
    if (last < 0 || this.names[last]! < name) {
      this.names.push(name);
      this.nodes.push(node);
      return true;
    }
    const i = this.find(name);
    if (i < 0) return false;
    this.nodes[i] = node;
    return true;
  }

  /** Building is over: no more changes, and no spare room kept in the arrays. */
  fix(): void {
    this.fixed = true;
    this.names = this.names.slice();
    this.nodes = this.nodes.slice();
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
    const names = this.names;
    // the builder asks about every new name, and in tar order each is past the last one
    if (names.length === 0 || names[names.length - 1]! < name) return undefined;
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
