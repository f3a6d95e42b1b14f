/**
 * Inode numbers. fuse-native carries only 32 bits, so instead of Go's `layerID << 32 | n` each layer
 * gets a contiguous block (`base + node.id`) and synthetic nodes get single numbers, all from one
 * counter. Numbers are stable for the life of the process (the mount does not outlive it).
 */
export class InoAllocator {
  private next = 2; // 1 = mount root
  private wrapped = false;

  /** Reserve `count` consecutive numbers; returns the base (first number is base + 1 ... base + count). */
  reserve(count: number): number {
    if (this.next + count >= 0xffff_fff0) {
      // extremely long-lived process with millions of layers: start over (collisions become possible)
      this.next = 2;
      this.wrapped = true;
    }
    const base = this.next - 1;
    this.next += count;
    return base;
  }

  one(): number {
    return this.reserve(1) + 1;
  }

  get hasWrapped(): boolean {
    return this.wrapped;
  }
}
